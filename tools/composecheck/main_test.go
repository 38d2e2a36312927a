package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const composeFile = "../../docker-compose.yml"

// checkCopy writes the repository's docker-compose.yml, edited by edit, next to a
// copy of its Dockerfile in a temporary directory, and runs the check on it.
func checkCopy(t *testing.T, edit func(string) string, dockerfile func(string) string) (int, string) {
	t.Helper()
	dir := t.TempDir()
	for _, copy := range []struct {
		from string
		edit func(string) string
	}{{composeFile, edit}, {"../../Dockerfile", dockerfile}} {
		raw, err := os.ReadFile(copy.from)
		if err != nil {
			t.Fatal(err)
		}
		text := string(raw)
		if copy.edit != nil {
			if text = copy.edit(text); strings.HasPrefix(text, missing) {
				t.Fatalf("%s no longer holds %q: update this test", copy.from, strings.TrimPrefix(text, missing))
			}
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(copy.from)), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var stdout, stderr bytes.Buffer
	code := run([]string{filepath.Join(dir, "docker-compose.yml")}, &stdout, &stderr)
	return code, stdout.String() + stderr.String()
}

// missing starts what an edit returns when the text it replaces is not in the file.
const missing = "\x00missing: "

func replace(old, new string) func(string) string {
	return func(text string) string {
		if !strings.Contains(text, old) {
			return missing + old
		}
		return strings.Replace(text, old, new, 1)
	}
}

func TestRepositoryFilePasses(t *testing.T) {
	code, out := checkCopy(t, nil, nil)
	if code != 0 || !strings.Contains(out, ": ok (") {
		t.Fatalf("exit %d: %s", code, out)
	}
}

func TestBrokenCopiesFail(t *testing.T) {
	cases := []struct {
		name       string
		edit       func(string) string
		dockerfile func(string) string
		want       string
	}{
		{"yaml", replace("services:\n", "services:\n  oops: [\n"), nil, "yaml"},
		{"schema", replace("    restart: unless-stopped\n    # Longer", "    restart_policy: always\n    # Longer"),
			nil, "restart_policy"},
		{"no restart", replace("    restart: unless-stopped\n    # Longer", "    # Longer"), nil,
			"service triggerer: runs for good but restart is \"\""},
		{"one-shot restarts", replace(`restart: "no"`, "restart: always"), nil,
			"service kafka-init: a one-shot job"},
		{"no healthcheck", replace("    healthcheck:\n      test: [\"CMD-SHELL\", \"pg_isready", "    x-healthcheck:\n      test: [\"CMD-SHELL\", \"pg_isready"),
			nil, "service postgres: runs for good but has no healthcheck"},
		{"started, not healthy", replace("      postgres:\n        condition: service_healthy",
			"      postgres:\n        condition: service_started"), nil,
			"service triggerer: depends_on postgres with condition \"service_started\""},
		{"no topic job", replace("      kafka-init:\n        condition: service_completed_successfully\n      postgres:",
			"      postgres:"), nil, "service triggerer: no depends_on kafka-init"},
		{"log dirs outside", replace("KAFKA_LOG_DIRS: /var/lib/kafka/data", "KAFKA_LOG_DIRS: /tmp/kraft-logs"), nil,
			"KAFKA_LOG_DIRS /tmp/kraft-logs lies in no named volume"},
		{"bad cluster id", replace("CLUSTER_ID: vQtwWncYVieXblY6y4VQgQ", "CLUSTER_ID: my-cluster"), nil,
			"CLUSTER_ID \"my-cluster\" is not a base64 UUID"},
		{"missing dlq topic", replace("for topic in orders orders.dlq;", "for topic in orders;"), nil,
			"does not create the topic orders.dlq"},
		{"bootstrap on localhost", replace("SHAREDSTREAM_CONN_KAFKA_DEFAULT__BOOTSTRAP_SERVERS: kafka:9092",
			"SHAREDSTREAM_CONN_KAFKA_DEFAULT__BOOTSTRAP_SERVERS: 127.0.0.1:9092"), nil,
			"127.0.0.1:9092 is not a listener Kafka advertises on its service name (kafka:9092)"},
		{"bootstrap missing", replace("      SHAREDSTREAM_CONN_KAFKA_DEFAULT__BOOTSTRAP_SERVERS: kafka:9092\n", ""), nil,
			"no SHAREDSTREAM_CONN_KAFKA_DEFAULT__BOOTSTRAP_SERVERS in its environment"},
		{"database host", replace("@postgres:5432/", "@localhost:5432/"), nil,
			"names the host \"localhost\", not the postgres service"},
		{"health host", replace("SHAREDSTREAM__TRIGGERER__HEALTH_HOST: 0.0.0.0", "SHAREDSTREAM__TRIGGERER__HEALTH_HOST: 127.0.0.1"),
			nil, "must listen on 0.0.0.0"},
		{"health port", replace(`SHAREDSTREAM__TRIGGERER__HEALTH_PORT: "8794"`, `SHAREDSTREAM__TRIGGERER__HEALTH_PORT: "9000"`),
			nil, "the health port 9000 is not published"},
		{"undefined volume", replace("volumes:\n  kafka-data:\n", "volumes:\n"), nil, "kafka-data"},
		{"root image", nil, replace("USER sharedstream\n", ""), "the final stage runs as root"},
		{"shell entrypoint", nil, replace(`ENTRYPOINT ["sharedstream"]`, "ENTRYPOINT sharedstream"),
			"ENTRYPOINT is in shell form"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, out := checkCopy(t, c.edit, c.dockerfile)
			if code != 1 || !strings.Contains(out, c.want) {
				t.Fatalf("exit %d, want 1 and %q in:\n%s", code, c.want, out)
			}
		})
	}
}

func TestPrintServices(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"-print-services", "triggerer", composeFile}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	for _, want := range []string{`"sharedstream"`, `"run"`, `"working_dir": "/app"`, `"kafka:9092"`} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("no %s in %s", want, stdout.String())
		}
	}
}
