// Command composecheck checks docker-compose.yml without Docker.
//
// It loads the file with compose-go, the loader Docker Compose v2 itself uses
// (schema validation, interpolation, normalisation, consistency checks), then
// asserts what the sharedstream stack relies on:
//
//   - every long-running service restarts on its own and has a healthcheck; the
//     one-shot jobs (those others wait for with service_completed_successfully) do
//     not restart;
//   - a service_healthy dependency names a service that has a healthcheck;
//   - the triggerer waits for healthy kafka and postgres and for the topic job;
//     the producer waits for the topic job;
//   - Kafka's KAFKA_LOG_DIRS and PostgreSQL's data directory lie inside named
//     volumes, so data survives `docker compose down` and up;
//   - the topic job creates the watched topic and its dead-letter topic;
//   - the triggerer's Kafka bootstrap (SHAREDSTREAM_CONN_KAFKA_DEFAULT__BOOTSTRAP_SERVERS)
//     and the producer's (KAFKA_BOOTSTRAP_SERVERS) name a listener Kafka advertises
//     on its service name; its database URL names the postgres service and its
//     user, password and database;
//   - the triggerer's health server listens on all interfaces, on the port that is
//     published and that its healthcheck asks for /readyz;
//   - the triggerer and producer are built from the Dockerfile, whose final stage has
//     an exec-form ENTRYPOINT and a non-root USER.
//
// Usage:
//
//	composecheck [-topics orders,orders.dlq] [-print-services triggerer,producer] docker-compose.yml
//
// It prints one line per problem and exits 1, or one "ok" line and exits 0.
// With -print-services it prints, once every check passed, a JSON object with each
// named service's effective entrypoint, command, working directory and environment
// (the Dockerfile's ENTRYPOINT, CMD and WORKDIR where the service does not set its
// own): what tests/e2e/test_compose_entrypoint.py runs against real services.
package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
)

// The services of the stack, by name.
const (
	kafkaService     = "kafka"
	postgresService  = "postgres"
	topicJobService  = "kafka-init"
	triggererService = "triggerer"
	producerService  = "producer"

	healthy   = types.ServiceConditionHealthy
	completed = types.ServiceConditionCompletedSuccessfully

	bootstrapEnv       = "SHAREDSTREAM_CONN_KAFKA_DEFAULT__BOOTSTRAP_SERVERS"
	connectionJSONEnv  = "SHAREDSTREAM_CONN_KAFKA_DEFAULT"
	databaseURLEnv     = "SHAREDSTREAM__DATABASE__URL"
	healthHostEnv      = "SHAREDSTREAM__TRIGGERER__HEALTH_HOST"
	healthPortEnv      = "SHAREDSTREAM__TRIGGERER__HEALTH_PORT"
	producerBootstrap  = "KAFKA_BOOTSTRAP_SERVERS"
	defaultTopicsValue = "orders,orders.dlq"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	flags := flag.NewFlagSet("composecheck", flag.ContinueOnError)
	flags.SetOutput(stderr)
	topics := flags.String("topics", defaultTopicsValue,
		"comma-separated topics the topic job must create")
	printServices := flags.String("print-services", "",
		"comma-separated services whose effective command and environment to print as JSON")
	flags.Usage = func() {
		fmt.Fprintln(stderr, "usage: composecheck [-topics T,...] [-print-services S,...] docker-compose.yml")
		flags.PrintDefaults()
	}
	if err := flags.Parse(args); err != nil {
		return 2
	}
	if flags.NArg() != 1 {
		flags.Usage()
		return 2
	}
	file := flags.Arg(0)
	project, err := load(context.Background(), file)
	if err != nil {
		fmt.Fprintf(stderr, "composecheck: %s: %s\n", file, oneLine(err.Error()))
		return 1
	}
	problems := check(project, splitList(*topics))
	for _, problem := range problems {
		fmt.Fprintf(stderr, "composecheck: %s: %s\n", file, problem)
	}
	if len(problems) > 0 {
		return 1
	}
	if *printServices != "" {
		out, err := describe(project, splitList(*printServices))
		if err != nil {
			fmt.Fprintf(stderr, "composecheck: %s: %s\n", file, err)
			return 1
		}
		fmt.Fprintln(stdout, string(out))
		return 0
	}
	fmt.Fprintf(stdout, "composecheck: %s: ok (%s)\n", file, strings.Join(project.ServiceNames(), ", "))
	return 0
}

// load reads the file as `docker compose` would in its directory: the file's
// directory is the project directory, a .env there is read, and the result is
// validated against the Compose schema and for consistency. The caller's
// environment is not used, so the check gives the same answer everywhere.
func load(ctx context.Context, file string) (*types.Project, error) {
	abs, err := filepath.Abs(file)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(abs); err != nil {
		return nil, err
	}
	options, err := cli.NewProjectOptions([]string{abs},
		cli.WithWorkingDirectory(filepath.Dir(abs)),
		cli.WithDotEnv,
		cli.WithInterpolation(true),
		cli.WithNormalization(true),
		cli.WithConsistency(true),
		cli.WithResolvedPaths(true),
	)
	if err != nil {
		return nil, err
	}
	return options.LoadProject(ctx)
}

func oneLine(text string) string {
	return strings.Join(strings.Fields(text), " ")
}

func splitList(text string) []string {
	var out []string
	for _, item := range strings.Split(text, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// problems collects one line per failed assertion.
type problems []string

func (p *problems) add(format string, args ...any) {
	*p = append(*p, fmt.Sprintf(format, args...))
}

func check(project *types.Project, topics []string) []string {
	var found problems
	services := map[string]types.ServiceConfig{}
	for _, name := range []string{kafkaService, postgresService, topicJobService, triggererService, producerService} {
		service, err := project.GetService(name)
		if err != nil {
			found.add("no service %q: the stack needs %s, %s, %s, %s and %s", name,
				kafkaService, postgresService, topicJobService, triggererService, producerService)
			continue
		}
		services[name] = service
	}
	checkLifecycles(project, &found)
	if len(services) < 5 {
		return found
	}
	kafka, postgres := services[kafkaService], services[postgresService]
	triggerer, producer, topicJob := services[triggererService], services[producerService], services[topicJobService]

	requireDependency(&found, triggerer, kafkaService, healthy)
	requireDependency(&found, triggerer, postgresService, healthy)
	requireDependency(&found, triggerer, topicJobService, completed)
	requireDependency(&found, producer, topicJobService, completed)
	requireDependency(&found, topicJob, kafkaService, healthy)

	checkKafkaData(project, kafka, &found)
	checkPostgresData(project, postgres, &found)

	internal := advertisedOn(kafka)
	if len(internal) == 0 {
		found.add("service %s: KAFKA_ADVERTISED_LISTENERS has no listener on the host %q, "+
			"so no other service can reach it by name", kafkaService, kafkaService)
	}
	checkTopicJob(topicJob, topics, internal, &found)
	checkTriggerer(project, triggerer, postgres, internal, &found)
	checkBootstrap(&found, producer, producerBootstrap, env(producer, producerBootstrap), internal)
	for _, service := range []types.ServiceConfig{triggerer, producer} {
		if service.Build == nil {
			found.add("service %s: no build: it must run the image built from the Dockerfile", service.Name)
			continue
		}
		image, err := readDockerfile(service.Build)
		if err != nil {
			found.add("service %s: %s", service.Name, oneLine(err.Error()))
			continue
		}
		for _, problem := range image.problems() {
			found.add("service %s: %s: %s", service.Name, relative(project, image.path), problem)
		}
	}
	return found
}

// checkLifecycles: one-shot jobs do not restart; every other service restarts
// and has a healthcheck; service_healthy names a service with a healthcheck.
func checkLifecycles(project *types.Project, found *problems) {
	oneShot := map[string]bool{}
	for _, service := range project.Services {
		for dependency, spec := range service.DependsOn {
			if spec.Condition == completed {
				oneShot[dependency] = true
			}
		}
	}
	for _, name := range project.ServiceNames() {
		service := project.Services[name]
		if oneShot[name] {
			if service.Restart != "" && service.Restart != types.RestartPolicyNo {
				found.add("service %s: a one-shot job (others wait for it to complete) with restart: %s; "+
					"use restart: \"no\"", name, service.Restart)
			}
		} else {
			switch {
			case service.Restart == types.RestartPolicyUnlessStopped, service.Restart == types.RestartPolicyAlways,
				strings.HasPrefix(service.Restart, types.RestartPolicyOnFailure):
			default:
				found.add("service %s: runs for good but restart is %q; use restart: unless-stopped",
					name, service.Restart)
			}
			if !hasHealthcheck(service) {
				found.add("service %s: runs for good but has no healthcheck", name)
			}
		}
		for _, dependency := range sortedKeys(service.DependsOn) {
			if service.DependsOn[dependency].Condition != healthy {
				continue
			}
			if target, ok := project.Services[dependency]; ok && !hasHealthcheck(target) {
				found.add("service %s: waits for %s to be healthy, but %s has no healthcheck",
					name, dependency, dependency)
			}
		}
	}
}

func hasHealthcheck(service types.ServiceConfig) bool {
	check := service.HealthCheck
	return check != nil && !check.Disable && len(check.Test) > 0 && check.Test[0] != "NONE"
}

func requireDependency(found *problems, service types.ServiceConfig, dependency, condition string) {
	spec, ok := service.DependsOn[dependency]
	switch {
	case !ok:
		found.add("service %s: no depends_on %s (condition: %s)", service.Name, dependency, condition)
	case spec.Condition != condition:
		found.add("service %s: depends_on %s with condition %q; it needs condition: %s",
			service.Name, dependency, spec.Condition, condition)
	}
}

func env(service types.ServiceConfig, key string) string {
	if value, ok := service.Environment[key]; ok && value != nil {
		return *value
	}
	return ""
}

// namedVolumeHolding is the named volume (declared under volumes:) mounted at or
// above dir, or "".
func namedVolumeHolding(project *types.Project, service types.ServiceConfig, dir string) string {
	dir = path.Clean(dir)
	for _, mount := range service.Volumes {
		if mount.Type != types.VolumeTypeVolume || mount.Source == "" {
			continue
		}
		if _, declared := project.Volumes[mount.Source]; !declared {
			continue
		}
		target := path.Clean(mount.Target)
		if dir == target || strings.HasPrefix(dir, strings.TrimSuffix(target, "/")+"/") {
			return mount.Source
		}
	}
	return ""
}

func checkKafkaData(project *types.Project, kafka types.ServiceConfig, found *problems) {
	logDirs := env(kafka, "KAFKA_LOG_DIRS")
	if logDirs == "" {
		found.add("service %s: no KAFKA_LOG_DIRS: the image keeps its data outside any volume", kafka.Name)
	}
	for _, dir := range splitList(logDirs) {
		if namedVolumeHolding(project, kafka, dir) == "" {
			found.add("service %s: KAFKA_LOG_DIRS %s lies in no named volume: the data is lost with the container",
				kafka.Name, dir)
		}
	}
	if dir := env(kafka, "KAFKA_METADATA_LOG_DIR"); dir != "" && namedVolumeHolding(project, kafka, dir) == "" {
		found.add("service %s: KAFKA_METADATA_LOG_DIR %s lies in no named volume", kafka.Name, dir)
	}
	if id := env(kafka, "CLUSTER_ID"); id != "" {
		if raw, err := base64.RawURLEncoding.DecodeString(id); err != nil || len(raw) != 16 {
			found.add("service %s: CLUSTER_ID %q is not a base64 UUID (22 characters, as kafka-storage.sh random-uuid prints)",
				kafka.Name, id)
		}
	}
}

var majorTag = regexp.MustCompile(`:(\d+)`)

// checkPostgresData: the image's data directory ($PGDATA, by default
// /var/lib/postgresql/data before PostgreSQL 18 and /var/lib/postgresql/<major>/docker
// since) lies in a named volume.
func checkPostgresData(project *types.Project, postgres types.ServiceConfig, found *problems) {
	data := env(postgres, "PGDATA")
	if data == "" {
		data = "/var/lib/postgresql/data"
		if match := majorTag.FindStringSubmatch(postgres.Image); match != nil {
			if major, _ := strconv.Atoi(match[1]); major >= 18 {
				data = fmt.Sprintf("/var/lib/postgresql/%d/docker", major)
			}
		}
	}
	if namedVolumeHolding(project, postgres, data) == "" {
		found.add("service %s: its data directory %s lies in no named volume: the data is lost with the container",
			postgres.Name, data)
	}
}

// advertisedOn lists the host:port addresses Kafka advertises on its service name.
func advertisedOn(kafka types.ServiceConfig) []string {
	var out []string
	for _, listener := range splitList(env(kafka, "KAFKA_ADVERTISED_LISTENERS")) {
		_, address, ok := strings.Cut(listener, "://")
		if !ok {
			continue
		}
		host, _, err := net.SplitHostPort(address)
		if err == nil && host == kafka.Name {
			out = append(out, address)
		}
	}
	return out
}

var shellWords = regexp.MustCompile(`[^\s;'"]+`)

func checkTopicJob(job types.ServiceConfig, topics, internal []string, found *problems) {
	words := shellWords.FindAllString(strings.Join(append(slices.Clone(job.Entrypoint), job.Command...), " "), -1)
	if !slices.Contains(words, "--create") {
		found.add("service %s: its command creates no topic (no kafka-topics.sh --create)", job.Name)
	}
	for _, topic := range topics {
		if !slices.Contains(words, topic) {
			found.add("service %s: does not create the topic %s (sharedstream never creates topics)", job.Name, topic)
		}
	}
	if !slices.ContainsFunc(words, func(word string) bool { return slices.Contains(internal, word) }) {
		found.add("service %s: names none of Kafka's addresses on its service name (%s)",
			job.Name, strings.Join(internal, ", "))
	}
}

// checkBootstrap: every address of a bootstrap list is one Kafka advertises on its service name.
func checkBootstrap(found *problems, service types.ServiceConfig, variable, value string, internal []string) {
	if value == "" {
		found.add("service %s: no %s in its environment", service.Name, variable)
		return
	}
	for _, address := range splitList(value) {
		if !slices.Contains(internal, address) {
			found.add("service %s: %s=%s: %s is not a listener Kafka advertises on its service name (%s)",
				service.Name, variable, value, address, strings.Join(internal, ", "))
		}
	}
}

func checkTriggerer(project *types.Project, triggerer, postgres types.ServiceConfig, internal []string, found *problems) {
	if len(triggerer.Command) == 0 || triggerer.Command[0] != "run" || !slices.Contains(triggerer.Command, "--config") {
		found.add("service %s: command %q is not `run WATCHERS --config FILE ...`", triggerer.Name, []string(triggerer.Command))
	}

	// Kafka: the per-key variable wins over the JSON one, which wins over the file.
	bootstrap, variable := env(triggerer, bootstrapEnv), bootstrapEnv
	if bootstrap == "" {
		var connection map[string]any
		if text := env(triggerer, connectionJSONEnv); text != "" && json.Unmarshal([]byte(text), &connection) == nil {
			bootstrap, _ = connection["bootstrap.servers"].(string)
			variable = connectionJSONEnv + " bootstrap.servers"
		}
	}
	if bootstrap == "" {
		found.add("service %s: no %s in its environment: the config file's bootstrap.servers would be used",
			triggerer.Name, bootstrapEnv)
	} else {
		checkBootstrap(found, triggerer, variable, bootstrap, internal)
	}

	// The database: the postgres service, with its user, password and database.
	checkDatabaseURL(triggerer, postgres, found)

	// Health: all interfaces, the published port, /readyz in the healthcheck.
	host := env(triggerer, healthHostEnv)
	if host != "0.0.0.0" && host != "::" {
		found.add("service %s: %s is %q: the health server must listen on 0.0.0.0 to be reached from outside the container",
			triggerer.Name, healthHostEnv, host)
	}
	port, err := strconv.Atoi(env(triggerer, healthPortEnv))
	if err != nil || port < 1 || port > 65535 {
		found.add("service %s: %s must be set to the health server's port (1-65535)", triggerer.Name, healthPortEnv)
		return
	}
	if !slices.ContainsFunc(triggerer.Ports, func(p types.ServicePortConfig) bool { return int(p.Target) == port }) {
		found.add("service %s: the health port %d is not published (ports:)", triggerer.Name, port)
	}
	if hasHealthcheck(triggerer) {
		test := strings.Join(triggerer.HealthCheck.Test, " ")
		if !strings.Contains(test, fmt.Sprintf(":%d/readyz", port)) {
			found.add("service %s: its healthcheck does not ask :%d/readyz", triggerer.Name, port)
		}
	}
}

func checkDatabaseURL(triggerer, postgres types.ServiceConfig, found *problems) {
	text := env(triggerer, databaseURLEnv)
	if text == "" {
		found.add("service %s: no %s in its environment", triggerer.Name, databaseURLEnv)
		return
	}
	// Never print the URL: it holds a password.
	parsed, err := url.Parse(text)
	if err != nil {
		found.add("service %s: %s is not a URL", triggerer.Name, databaseURLEnv)
		return
	}
	if !strings.HasPrefix(parsed.Scheme, "postgresql") {
		found.add("service %s: %s is a %s URL, not a PostgreSQL one", triggerer.Name, databaseURLEnv, parsed.Scheme)
	}
	if parsed.Hostname() != postgres.Name {
		found.add("service %s: %s names the host %q, not the %s service", triggerer.Name, databaseURLEnv,
			parsed.Hostname(), postgres.Name)
	}
	user := env(postgres, "POSTGRES_USER")
	if user == "" {
		user = "postgres"
	}
	database := env(postgres, "POSTGRES_DB")
	if database == "" {
		database = user
	}
	password, _ := parsed.User.Password()
	switch {
	case parsed.User.Username() != user:
		found.add("service %s: %s logs in as %q, but %s creates the user %q", triggerer.Name, databaseURLEnv,
			parsed.User.Username(), postgres.Name, user)
	case password != env(postgres, "POSTGRES_PASSWORD"):
		found.add("service %s: the password in %s is not %s's POSTGRES_PASSWORD", triggerer.Name,
			databaseURLEnv, postgres.Name)
	case strings.TrimPrefix(parsed.Path, "/") != database:
		found.add("service %s: %s names the database %q, but %s creates %q", triggerer.Name, databaseURLEnv,
			strings.TrimPrefix(parsed.Path, "/"), postgres.Name, database)
	}
}

// dockerImage is what the final stage of a Dockerfile sets.
type dockerImage struct {
	path       string
	entrypoint []string
	cmd        []string
	workdir    string
	user       string
	execForm   bool
}

func (image dockerImage) problems() []string {
	var out []string
	if len(image.entrypoint) == 0 {
		out = append(out, "the final stage has no ENTRYPOINT")
	} else if !image.execForm {
		out = append(out, "ENTRYPOINT is in shell form: signals would go to /bin/sh, not the process (use [\"...\"])")
	}
	user, _, _ := strings.Cut(image.user, ":")
	if user == "" || user == "root" || user == "0" {
		out = append(out, "the final stage runs as root (add a USER)")
	}
	return out
}

// readDockerfile reads the ENTRYPOINT, CMD, WORKDIR and USER of the final stage
// of a build's Dockerfile. A stage built FROM an earlier stage inherits them;
// one built FROM an image starts from nothing known.
func readDockerfile(build *types.BuildConfig) (dockerImage, error) {
	if build.DockerfileInline != "" {
		return dockerImage{}, errors.New("an inline Dockerfile is not checked; use a Dockerfile")
	}
	file := build.Dockerfile
	if !filepath.IsAbs(file) {
		file = filepath.Join(build.Context, file)
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		return dockerImage{}, err
	}
	stages := map[string]dockerImage{}
	var current dockerImage
	stage := ""
	for _, line := range dockerfileLines(string(raw)) {
		instruction, rest, _ := strings.Cut(line, " ")
		rest = strings.TrimSpace(rest)
		switch strings.ToUpper(instruction) {
		case "FROM":
			words := slices.DeleteFunc(strings.Fields(rest), func(word string) bool {
				return strings.HasPrefix(word, "--") // --platform=...
			})
			current, stage = dockerImage{}, ""
			if len(words) > 0 {
				current = stages[strings.ToLower(words[0])] // empty unless an earlier stage
			}
			if n := len(words); n == 3 && strings.EqualFold(words[1], "AS") {
				stage = strings.ToLower(words[2])
			}
		case "ENTRYPOINT":
			current.entrypoint, current.execForm = execOrShell(rest)
			current.cmd = nil // Docker clears an inherited CMD when ENTRYPOINT is set
		case "CMD":
			current.cmd, _ = execOrShell(rest)
		case "WORKDIR":
			if path.IsAbs(rest) || current.workdir == "" {
				current.workdir = path.Clean("/" + rest)
			} else {
				current.workdir = path.Join(current.workdir, rest)
			}
		case "USER":
			current.user = rest
		}
		if stage != "" {
			stages[stage] = current
		}
	}
	current.path = file
	return current, nil
}

// dockerfileLines joins continuation lines and drops comments and blank lines.
func dockerfileLines(text string) []string {
	var out []string
	var pending strings.Builder
	for _, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") || (trimmed == "" && pending.Len() == 0) {
			continue
		}
		if strings.HasSuffix(trimmed, "\\") {
			pending.WriteString(strings.TrimSuffix(trimmed, "\\"))
			pending.WriteString(" ")
			continue
		}
		pending.WriteString(trimmed)
		if joined := strings.TrimSpace(pending.String()); joined != "" {
			out = append(out, joined)
		}
		pending.Reset()
	}
	return out
}

func execOrShell(text string) ([]string, bool) {
	var words []string
	if strings.HasPrefix(text, "[") && json.Unmarshal([]byte(text), &words) == nil {
		return words, true
	}
	return []string{"/bin/sh", "-c", text}, false
}

func relative(project *types.Project, file string) string {
	if rel, err := filepath.Rel(project.WorkingDir, file); err == nil {
		return rel
	}
	return file
}

// effective is how a service's container starts.
type effective struct {
	Entrypoint  []string           `json:"entrypoint"`
	Command     []string           `json:"command"`
	WorkingDir  string             `json:"working_dir"`
	Environment map[string]*string `json:"environment"`
}

// describe: the effective entrypoint, command, working directory and
// environment of each named service, as Docker would start its container.
func describe(project *types.Project, names []string) ([]byte, error) {
	out := map[string]effective{}
	for _, name := range names {
		service, err := project.GetService(name)
		if err != nil {
			return nil, err
		}
		var image dockerImage
		if service.Build != nil {
			if image, err = readDockerfile(service.Build); err != nil {
				return nil, err
			}
		}
		desc := effective{Entrypoint: image.entrypoint, Command: image.cmd, WorkingDir: image.workdir,
			Environment: map[string]*string(service.Environment)}
		if service.Entrypoint != nil {
			// Setting entrypoint in a compose file also clears the image's CMD.
			desc.Entrypoint, desc.Command = service.Entrypoint, nil
		}
		if service.Command != nil {
			desc.Command = service.Command
		}
		if service.WorkingDir != "" {
			desc.WorkingDir = service.WorkingDir
		}
		if desc.WorkingDir == "" {
			desc.WorkingDir = "/"
		}
		out[name] = desc
	}
	return json.MarshalIndent(out, "", "  ")
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for key := range m {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	return keys
}
