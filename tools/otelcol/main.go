// Command otelcol is the smallest OpenTelemetry Collector the project's tests need: an
// OTLP receiver (HTTP and gRPC) feeding the file exporter, through the batch processor
// if a config asks for it. It is built from the collector's Go modules by
// scripts/otelcol, so the tests export spans to the real receiver a deployment would
// run, and read back what it decoded from the JSON-lines file it writes.
package main

import (
	"os"

	"github.com/open-telemetry/opentelemetry-collector-contrib/exporter/fileexporter"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/provider/envprovider"
	"go.opentelemetry.io/collector/confmap/provider/fileprovider"
	"go.opentelemetry.io/collector/exporter"
	"go.opentelemetry.io/collector/otelcol"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/collector/processor/batchprocessor"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/collector/receiver/otlpreceiver"
	"go.opentelemetry.io/collector/service/telemetry/otelconftelemetry"
)

// version is the collector release every module of go.mod is at.
const version = "0.161.0"

func components() (otelcol.Factories, error) {
	var err error
	factories := otelcol.Factories{Telemetry: otelconftelemetry.NewFactory()}
	if factories.Receivers, err = otelcol.MakeFactoryMap[receiver.Factory](otlpreceiver.NewFactory()); err != nil {
		return otelcol.Factories{}, err
	}
	if factories.Processors, err = otelcol.MakeFactoryMap[processor.Factory](batchprocessor.NewFactory()); err != nil {
		return otelcol.Factories{}, err
	}
	if factories.Exporters, err = otelcol.MakeFactoryMap[exporter.Factory](fileexporter.NewFactory()); err != nil {
		return otelcol.Factories{}, err
	}
	return factories, nil
}

func main() {
	settings := otelcol.CollectorSettings{
		BuildInfo: component.BuildInfo{
			Command:     "otelcol",
			Description: "sharedstream's test collector (OTLP in, file out)",
			Version:     version,
		},
		Factories: components,
		// A config is a file (--config PATH) whose ${NAME} are environment variables;
		// no config is fetched over the network.
		ConfigProviderSettings: otelcol.ConfigProviderSettings{
			ResolverSettings: confmap.ResolverSettings{
				ProviderFactories: []confmap.ProviderFactory{
					fileprovider.NewFactory(), envprovider.NewFactory(),
				},
				DefaultScheme: "env",
			},
		},
	}
	// The command prints its own "Error: ..." line.
	if err := otelcol.NewCommand(settings).Execute(); err != nil {
		os.Exit(1)
	}
}
