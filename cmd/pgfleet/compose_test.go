package main

// This file checks docker-compose.yml and the Dockerfile the way a reviewer
// would: there is no Docker engine here, so these checks are what keep the
// deployment honest. checkCompose returns every problem it finds, each naming
// the service and the mismatch, so a broken edit fails with a message that
// says what to fix.

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"

	"go.yaml.in/yaml/v3"
)

// TestComposeFile checks the docker-compose.yml at the repository root.
func TestComposeFile(t *testing.T) {
	data, err := os.ReadFile("../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range checkCompose(data, os.DirFS("../..")) {
		t.Error(p)
	}

	// What the header comment and the task promise: three coordinators on
	// 6432, 6433 and 6434 (metrics on 9187, 9188 and 9189) in front of
	// worker1, worker2, and Prometheus on 9090 scraping them.
	cf, err := parseCompose(data)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		service        string
		client, metric string // published host ports
	}{
		{"coordinator1", "6432", "9187"},
		{"coordinator2", "6433", "9188"},
		{"coordinator3", "6434", "9189"},
	} {
		s, ok := cf.Services[tc.service]
		if !ok {
			t.Errorf("docker-compose.yml: no service %s", tc.service)
			continue
		}
		ports, errs := s.publishedPorts()
		if len(errs) > 0 {
			t.Errorf("%s: %v", tc.service, errs)
		}
		var hosts []string
		for _, p := range ports {
			hosts = append(hosts, p.host)
		}
		for _, want := range []string{tc.client, tc.metric} {
			if !slices.Contains(hosts, want) {
				t.Errorf("%s: host port %s is not published (published: %v)", tc.service, want, hosts)
			}
		}
		cmd, _ := s.command()
		if i := slices.IndexFunc(cmd, func(a string) bool { return strings.Contains(a, "worker") }); i < 0 || !strings.Contains(cmd[i], "worker1:") {
			t.Errorf("%s: the first --worker (the default node) should be worker1; command is %q", tc.service, cmd)
		}
	}
}

// A minimal valid deployment for the negative tests; each case breaks one
// thing in it.
const goodDockerfile = `FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY . .
RUN CGO_ENABLED=1 go build -trimpath -o /out/pgfleet ./cmd/pgfleet

FROM debian:bookworm-slim
COPY --from=build /out/pgfleet /usr/local/bin/pgfleet
USER 10001:10001
ENTRYPOINT ["/usr/local/bin/pgfleet"]
CMD ["serve"]
`

const goodCompose = `
services:
  pg1:
    image: postgres:15
    environment:
      POSTGRES_PASSWORD: secret
    healthcheck:
      test: ["CMD", "pg_isready"]
  pg2:
    image: postgres:15
    environment: ["POSTGRES_PASSWORD=secret"]
    command: postgres -c port=5433
    healthcheck:
      test: ["CMD", "pg_isready", "-p", "5433"]
  coord:
    build: .
    command: ["serve", "--listen=0.0.0.0:6432", "--metrics-listen=0.0.0.0:9187", "--worker", "pg1:5432,pg2:5433", "--user=postgres:secret", "--auth=scram-sha-256", "--gossip=0.0.0.0:7946"]
    ports: ["6432:6432"]
    depends_on:
      pg1: {condition: service_healthy}
      pg2: {condition: service_healthy}
  coord2:
    build: {context: ., dockerfile: Dockerfile}
    environment:
      PGFLEET_WORKERS: pg1:5432
      PGFLEET_USERS: postgres:secret
      PGFLEET_LISTEN: 0.0.0.0:7000
      PGFLEET_JOIN: coord:7946
    ports:
      - target: 7000
        published: "7001"
    depends_on:
      pg1: {condition: service_healthy}
  prom:
    image: prom/prometheus:v2.55.1
    volumes: ["./prom.yml:/etc/prometheus/prometheus.yml:ro"]
`

const goodPrometheus = `scrape_configs:
  - job_name: pgfleet
    static_configs:
      - targets: ["coord:9187"]
`

func TestComposeCheckReportsMistakes(t *testing.T) {
	fsys := fstest.MapFS{"Dockerfile": {Data: []byte(goodDockerfile)}, "prom.yml": {Data: []byte(goodPrometheus)},
		"prom-wrong.yml": {Data: []byte(strings.Replace(goodPrometheus, "coord:9187", "coord:9188", 1))}}
	for _, tc := range []struct {
		name      string
		old, new  string // replace old by new in goodCompose
		wantError string // "" means no problems at all
	}{
		{"valid", "", "", ""},
		{"worker names a missing service",
			`"pg1:5432,pg2:5433"`, `"pg1:5432,pg3:5433"`,
			`coord: --worker pg3:5433 names no service in the compose file`},
		{"worker on the wrong port",
			`"pg1:5432,pg2:5433"`, `"pg1:5432,pg2:5432"`,
			`coord: --worker pg2:5432 uses port 5432, but pg2's postgres listens on 5433`},
		{"password mismatch",
			`"--user=postgres:secret"`, `"--user=postgres:sekret"`,
			`coord: connects to pg1 as postgres with password "sekret", but pg1 has POSTGRES_PASSWORD "secret"`},
		{"duplicate host port",
			`published: "7001"`, `published: "6432"`,
			`host port 6432/tcp is published by both coord and coord2`},
		{"listen port not published",
			`PGFLEET_LISTEN: 0.0.0.0:7000`, `PGFLEET_LISTEN: 0.0.0.0:7002`,
			`coord2: listens on port 7002 (--listen 0.0.0.0:7002), but no published port targets it`},
		{"listen on loopback",
			`--listen=0.0.0.0:6432`, `--listen=127.0.0.1:6432`,
			`coord: --listen 127.0.0.1:6432 is a loopback address`},
		{"depends_on misses a worker",
			"      pg2: {condition: service_healthy}\n  coord2:", "  coord2:",
			`coord: points at worker pg2 but its depends_on does not list it`},
		{"missing Dockerfile",
			`dockerfile: Dockerfile`, `dockerfile: Dockerfile.coord`,
			`coord2: builds from Dockerfile.coord, which does not exist`},
		{"flags after a positional argument are ignored",
			`["serve", "--listen`, `["serve", "now", "--listen`,
			`coord: "serve" ignores arguments after the first non-flag "now"`},
		{"unknown flag",
			`"--auth=scram-sha-256"`, `"--authentication=scram-sha-256"`,
			`coord: pgfleet serve would reject its flags: flag provided but not defined: -authentication`},
		{"a coordinator outside the fleet",
			`      PGFLEET_JOIN: coord:7946` + "\n", "",
			`coord2: no --gossip: it is not part of the fleet`},
		{"join on the wrong port",
			`PGFLEET_JOIN: coord:7946`, `PGFLEET_JOIN: coord:7947`,
			`coord2: --join "coord:7947", but coord gossips on port 7946`},
		{"join names no coordinator",
			`PGFLEET_JOIN: coord:7946`, `PGFLEET_JOIN: pg1:7946`,
			`coord2: --join "pg1:7946" names no coordinator service`},
		{"prometheus scrapes a wrong port",
			`./prom.yml:`, `./prom-wrong.yml:`,
			`prom: prom-wrong.yml scrapes coord:9188, which is no coordinator's --metrics-listen`},
		{"prometheus misses a coordinator",
			`./prom.yml:`, `./prom-wrong.yml:`,
			`prom: prom-wrong.yml does not scrape coord:9187`},
		{"prometheus configuration missing",
			`./prom.yml:`, `./prom-none.yml:`,
			`prom: its configuration prom-none.yml:`},
		{"interpolation default is used",
			`POSTGRES_PASSWORD: secret`, `POSTGRES_PASSWORD: ${PW:-other}`,
			`coord: connects to pg1 as postgres with password "secret", but pg1 has POSTGRES_PASSWORD "other"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			text := goodCompose
			if tc.old != "" {
				if !strings.Contains(text, tc.old) {
					t.Fatalf("test case does not apply: %q is not in goodCompose", tc.old)
				}
				text = strings.Replace(text, tc.old, tc.new, 1)
			}
			problems := checkCompose([]byte(text), fsys)
			if tc.wantError == "" {
				for _, p := range problems {
					t.Error(p)
				}
				return
			}
			if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, tc.wantError) }) {
				t.Errorf("want a problem containing\n\t%s\ngot %d:\n\t%s", tc.wantError, len(problems), strings.Join(problems, "\n\t"))
			}
		})
	}
}

func TestComposeDockerfileMistakes(t *testing.T) {
	for _, tc := range []struct {
		name      string
		old, new  string
		wantError string
	}{
		{"valid", "", "", ""},
		{"builds another package", "./cmd/pgfleet", "./cmd/other",
			"no build stage runs go build ./cmd/pgfleet"},
		{"entrypoint is not pgfleet", `ENTRYPOINT ["/usr/local/bin/pgfleet"]`, `ENTRYPOINT ["/bin/sh"]`,
			`final stage ENTRYPOINT ["/bin/sh"] does not run pgfleet`},
		{"no entrypoint", `ENTRYPOINT ["/usr/local/bin/pgfleet"]`, ``,
			`final stage has no ENTRYPOINT`},
		{"binary not copied", `COPY --from=build /out/pgfleet /usr/local/bin/pgfleet`, `COPY --from=build /out/pgfleet /opt/pgfleet`,
			`final stage does not COPY --from=build /out/pgfleet to /usr/local/bin/pgfleet`},
		{"static runtime image", `FROM debian:bookworm-slim`, `FROM scratch`,
			`final stage is FROM scratch`},
		{"runs as root", `USER 10001:10001`, `USER root`,
			`final stage runs as root`},
		{"cgo disabled", `CGO_ENABLED=1`, `CGO_ENABLED=0`,
			`builds with CGO_ENABLED=0`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			text := goodDockerfile
			if tc.old != "" {
				if !strings.Contains(text, tc.old) {
					t.Fatalf("test case does not apply: %q is not in goodDockerfile", tc.old)
				}
				text = strings.Replace(text, tc.old, tc.new, 1)
			}
			_, problems := checkDockerfile("Dockerfile", text)
			if tc.wantError == "" {
				for _, p := range problems {
					t.Error(p)
				}
				return
			}
			if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, tc.wantError) }) {
				t.Errorf("want a problem containing\n\t%s\ngot %d:\n\t%s", tc.wantError, len(problems), strings.Join(problems, "\n\t"))
			}
		})
	}
}

// ---- compose model ----

type composeFile struct {
	Services map[string]*composeService `yaml:"services"`
	Volumes  map[string]any             `yaml:"volumes"`
}

type composeService struct {
	Image       string `yaml:"image"`
	Build       any    `yaml:"build"`      // "ctx" or {context, dockerfile}
	Entrypoint  any    `yaml:"entrypoint"` // string or list
	Command     any    `yaml:"command"`    // string or list
	Environment any    `yaml:"environment"`
	EnvFile     any    `yaml:"env_file"`
	Ports       []any  `yaml:"ports"`
	DependsOn   any    `yaml:"depends_on"` // list or {name: {condition}}
	Volumes     []any  `yaml:"volumes"`
	Healthcheck *struct {
		Test    any  `yaml:"test"`
		Disable bool `yaml:"disable"`
	} `yaml:"healthcheck"`
}

// parseCompose decodes a compose file, first applying compose's variable
// interpolation with the defaults written in the file (${VAR:-default}).
func parseCompose(data []byte) (*composeFile, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, err
	}
	var errs []string
	var walk func(n *yaml.Node)
	walk = func(n *yaml.Node) {
		if n.Kind == yaml.ScalarNode && strings.Contains(n.Value, "$") {
			v, err := interpolate(n.Value)
			if err != nil {
				errs = append(errs, fmt.Sprintf("line %d: %v", n.Line, err))
			}
			n.Value = v
		}
		for _, c := range n.Content {
			walk(c)
		}
	}
	walk(&root)
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	var cf composeFile
	if err := root.Decode(&cf); err != nil {
		return nil, err
	}
	return &cf, nil
}

// interpolate expands $$, ${VAR:-default} and ${VAR-default} to the literal
// and the default; a variable without a default has no knowable value here.
func interpolate(s string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' {
			b.WriteByte(s[i])
			continue
		}
		if strings.HasPrefix(s[i:], "$$") {
			b.WriteByte('$')
			i++
			continue
		}
		if strings.HasPrefix(s[i:], "${") {
			end := strings.IndexByte(s[i:], '}')
			if end < 0 {
				return s, fmt.Errorf("unterminated ${ in %q", s)
			}
			expr := s[i+2 : i+end]
			i += end
			if _, def, ok := strings.Cut(expr, ":-"); ok {
				b.WriteString(def)
				continue
			}
			if _, def, ok := strings.Cut(expr, "-"); ok {
				b.WriteString(def)
				continue
			}
			return s, fmt.Errorf("${%s} has no default, so its value cannot be checked; write ${%s:-value}", expr, expr)
		}
		j := i + 1
		for j < len(s) && (s[j] == '_' || s[j] >= 'a' && s[j] <= 'z' || s[j] >= 'A' && s[j] <= 'Z' || s[j] >= '0' && s[j] <= '9') {
			j++
		}
		if j == i+1 {
			b.WriteByte('$')
			continue
		}
		return s, fmt.Errorf("$%s has no default, so its value cannot be checked; write ${%s:-value}", s[i+1:j], s[i+1:j])
	}
	return b.String(), nil
}

func (s *composeService) isWorker() bool {
	img := s.Image
	if i := strings.LastIndexByte(img, '/'); i >= 0 {
		img = img[i+1:]
	}
	img, _, _ = strings.Cut(img, "@")
	img, _, _ = strings.Cut(img, ":")
	return img == "postgres"
}

func (s *composeService) isCoordinator() bool {
	return s.Build != nil || strings.Contains(s.Image, "pgfleet")
}

// dockerfile is the path, inside the compose file's directory, of the
// Dockerfile the service builds from.
func (s *composeService) dockerfile() (string, error) {
	ctx, file := ".", "Dockerfile"
	switch b := s.Build.(type) {
	case nil:
		return "", fmt.Errorf("has no build: section")
	case string:
		ctx = b
	case map[string]any:
		if c, ok := b["context"].(string); ok {
			ctx = c
		}
		if f, ok := b["dockerfile"].(string); ok {
			file = f
		}
	default:
		return "", fmt.Errorf("build: has an unexpected form %T", b)
	}
	p := path.Clean(path.Join(ctx, file))
	if !fs.ValidPath(p) {
		return "", fmt.Errorf("builds from %s, outside the compose file's directory", p)
	}
	return p, nil
}

func stringList(v any) ([]string, error) {
	switch v := v.(type) {
	case nil:
		return nil, nil
	case string:
		return shellFields(v)
	case []any:
		out := make([]string, len(v))
		for i, e := range v {
			out[i] = fmt.Sprint(e)
		}
		return out, nil
	}
	return nil, fmt.Errorf("unexpected form %T", v)
}

func (s *composeService) command() ([]string, error) { return stringList(s.Command) }

// environment returns the service's environment. Entries passed through
// from the host (a name without a value) are left out: their value is not
// in the file.
func (s *composeService) environment() (map[string]string, error) {
	env := map[string]string{}
	switch e := s.Environment.(type) {
	case nil:
	case map[string]any:
		for k, v := range e {
			if v != nil {
				env[k] = fmt.Sprint(v)
			}
		}
	case []any:
		for _, kv := range e {
			if k, v, ok := strings.Cut(fmt.Sprint(kv), "="); ok {
				env[k] = v
			}
		}
	default:
		return nil, fmt.Errorf("environment: has an unexpected form %T", e)
	}
	return env, nil
}

type publishedPort struct {
	host, container, proto string
}

func (s *composeService) publishedPorts() ([]publishedPort, []string) {
	var out []publishedPort
	var errs []string
	for _, p := range s.Ports {
		switch p := p.(type) {
		case map[string]any: // long syntax
			pp := publishedPort{container: fmt.Sprint(p["target"]), proto: "tcp"}
			if v, ok := p["published"]; ok {
				pp.host = fmt.Sprint(v)
			}
			if v, ok := p["protocol"]; ok {
				pp.proto = fmt.Sprint(v)
			}
			out = append(out, pp)
		default: // [ip:]host:container[/proto] or container
			spec := fmt.Sprint(p)
			pp := publishedPort{proto: "tcp"}
			if i := strings.LastIndexByte(spec, '/'); i >= 0 {
				spec, pp.proto = spec[:i], spec[i+1:]
			}
			i := strings.LastIndexByte(spec, ':')
			pp.container = spec[i+1:]
			if i >= 0 {
				rest := spec[:i]
				pp.host = rest[strings.LastIndexByte(rest, ':')+1:]
			}
			out = append(out, pp)
		}
	}
	for _, pp := range out {
		for _, n := range []string{pp.host, pp.container} {
			if n == "" {
				continue
			}
			if _, err := strconv.Atoi(n); err != nil {
				errs = append(errs, fmt.Sprintf("port %q in ports: is not a single number (ranges are not checked)", n))
			}
		}
	}
	return out, errs
}

// dependsOn maps each dependency to its condition ("service_started" for
// the list form).
func (s *composeService) dependsOn() map[string]string {
	deps := map[string]string{}
	switch d := s.DependsOn.(type) {
	case []any:
		for _, n := range d {
			deps[fmt.Sprint(n)] = "service_started"
		}
	case map[string]any:
		for n, v := range d {
			cond := "service_started"
			if m, ok := v.(map[string]any); ok {
				if c, ok := m["condition"].(string); ok {
					cond = c
				}
			}
			deps[n] = cond
		}
	}
	return deps
}

func (s *composeService) hasHealthcheck() bool {
	if s.Healthcheck == nil || s.Healthcheck.Disable {
		return false
	}
	t, _ := stringList(s.Healthcheck.Test)
	return len(t) > 0 && t[0] != "NONE"
}

// postgresPort is the port a postgres-image service listens on: -c port=N,
// -p N or --port=N in its command, else $PGPORT, else 5432.
func (s *composeService) postgresPort(env map[string]string) (string, error) {
	args, err := s.command()
	if err != nil {
		return "", fmt.Errorf("command: %v", err)
	}
	port := "5432"
	if v := env["PGPORT"]; v != "" {
		port = v
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		next := func() string {
			if i+1 < len(args) {
				i++
				return args[i]
			}
			return ""
		}
		var setting string
		switch {
		case a == "-c":
			setting = next()
		case strings.HasPrefix(a, "-c"):
			setting = a[2:]
		case strings.HasPrefix(a, "--"):
			setting = a[2:]
		case a == "-p":
			port = next()
		case strings.HasPrefix(a, "-p"):
			port = a[2:]
		}
		if k, v, ok := strings.Cut(setting, "="); ok && strings.TrimSpace(k) == "port" {
			port = strings.Trim(strings.TrimSpace(v), `'"`)
		}
	}
	return port, nil
}

// ---- the checks ----

// serveConfig is what "pgfleet serve" would run with, resolved the way
// cmd/pgfleet/main.go does it: flags first, then PGFLEET_* variables, then
// defaults.
type serveConfig struct {
	listen, metrics string
	workers         []string
	auth            string
	users           map[string]string
	workerPassword  string
	gossip          string   // the gossip address, "" without a fleet
	join            listFlag // members to join through
}

func resolveServe(args []string, env map[string]string) (serveConfig, []string) {
	var problems []string
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	listen := fs.String("listen", "", "")
	metrics := fs.String("metrics-listen", "", "")
	var workers listFlag
	fs.Var(&workers, "worker", "")
	var cf coordinatorFlags
	cf.register(fs) // the real shared flags, so a renamed flag fails here
	var ff fleetFlags
	ff.register(fs)
	if err := fs.Parse(args); err != nil {
		problems = append(problems, fmt.Sprintf("pgfleet serve would reject its flags: %v", err))
	}
	if rest := fs.Args(); len(rest) > 0 {
		problems = append(problems, fmt.Sprintf("%q ignores arguments after the first non-flag %q: %q", "serve", rest[0], rest))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	pick := func(name, envName, def string, flagVal string) string {
		if set[name] {
			return flagVal
		}
		if v := env[envName]; v != "" {
			return v
		}
		return def
	}
	c := serveConfig{
		listen:         pick("listen", "PGFLEET_LISTEN", "127.0.0.1:6432", *listen),
		metrics:        pick("metrics-listen", "PGFLEET_METRICS_LISTEN", "", *metrics),
		auth:           pick("auth", "PGFLEET_AUTH", "", cf.auth),
		workerPassword: pick("worker-password", "PGFLEET_WORKER_PASSWORD", "", cf.workerPassword),
		users:          map[string]string{},
	}
	if len(workers) == 0 {
		_ = workers.Set(env["PGFLEET_WORKERS"])
	}
	c.workers = workers
	c.gossip, c.join = pick("gossip", "PGFLEET_GOSSIP", "", ff.gossip), ff.join
	if len(c.join) == 0 {
		_ = c.join.Set(env["PGFLEET_JOIN"]) // as fleetFlags.apply
	}
	if c.gossip == "" && len(c.join) > 0 {
		c.gossip = "0.0.0.0:7946"
	}
	users := cf.users
	if !set["user"] {
		users = nil
		_ = users.Set(env["PGFLEET_USERS"])
	}
	for _, u := range users {
		name, pw, ok := strings.Cut(u, ":")
		if !ok || name == "" {
			problems = append(problems, fmt.Sprintf("user %q is not name:password", u))
			continue
		}
		c.users[name] = pw
	}
	if c.auth == "" {
		c.auth = "trust"
		if len(c.users) > 0 {
			c.auth = "scram-sha-256"
		}
	}
	return c, problems
}

// checkCompose returns every problem found in a compose file whose
// directory is fsys.
func checkCompose(data []byte, fsys fs.FS) []string {
	cf, err := parseCompose(data)
	if err != nil {
		return []string{fmt.Sprintf("compose file does not parse: %v", err)}
	}
	if len(cf.Services) == 0 {
		return []string{"compose file has no services"}
	}
	var problems []string
	names := make([]string, 0, len(cf.Services))
	for n := range cf.Services {
		names = append(names, n)
	}
	sort.Strings(names)
	dockerfiles := map[string]*dockerStage{} // path -> final stage, nil if unusable
	hostPorts := map[string]string{}         // "6432/tcp" -> service

	var coordinators int
	fleet := map[string]serveConfig{} // coordinator service -> its serve config
	for _, name := range names {
		s := cf.Services[name]
		bad := func(format string, args ...any) {
			problems = append(problems, name+": "+fmt.Sprintf(format, args...))
		}
		if s == nil {
			bad("empty service")
			continue
		}
		env, err := s.environment()
		if err != nil {
			bad("%v", err)
		}
		if s.EnvFile != nil {
			bad("uses env_file:, whose contents this check cannot see; put the settings in environment:")
		}
		ports, errs := s.publishedPorts()
		for _, e := range errs {
			bad("%s", e)
		}
		for _, p := range ports {
			if p.host == "" {
				continue
			}
			k := p.host + "/" + p.proto
			if other, dup := hostPorts[k]; dup {
				problems = append(problems, fmt.Sprintf("host port %s is published by both %s and %s", k, other, name))
			} else {
				hostPorts[k] = name
			}
		}
		for _, v := range s.Volumes {
			src, _, ok := strings.Cut(fmt.Sprint(v), ":")
			if _, isMap := v.(map[string]any); isMap || !ok || strings.HasPrefix(src, ".") || strings.HasPrefix(src, "/") || strings.HasPrefix(src, "~") {
				continue
			}
			if _, declared := cf.Volumes[src]; !declared {
				bad("uses volume %s, which the top-level volumes: section does not declare", src)
			}
		}
		if s.isWorker() && env["POSTGRES_PASSWORD"] == "" && env["POSTGRES_HOST_AUTH_METHOD"] != "trust" {
			bad("postgres image without POSTGRES_PASSWORD will not start")
		}
		if !s.isCoordinator() {
			continue
		}
		coordinators++

		// The image: built from a Dockerfile that exists and is right.
		final := (*dockerStage)(nil)
		if df, err := s.dockerfile(); err != nil {
			bad("%v", err)
		} else if st, seen := dockerfiles[df]; seen {
			final = st
		} else if text, err := fs.ReadFile(fsys, df); err != nil {
			bad("builds from %s, which does not exist (%v)", df, err)
			dockerfiles[df] = nil
		} else {
			st, ps := checkDockerfile(df, string(text))
			problems = append(problems, ps...)
			dockerfiles[df] = st
			final = st
		}

		// What runs: ENTRYPOINT (compose entrypoint: overrides it, and then
		// the image's CMD is dropped) followed by command: or CMD.
		var entry, args []string
		if final != nil {
			entry, args = final.entrypoint, final.cmd
			for k, v := range final.env {
				if _, ok := env[k]; !ok {
					env[k] = v
				}
			}
		}
		if s.Entrypoint != nil {
			entry, _ = stringList(s.Entrypoint)
			args = nil
		}
		if s.Command != nil {
			if args, err = s.command(); err != nil {
				bad("command: %v", err)
			}
		}
		if len(entry) == 0 || path.Base(entry[0]) != "pgfleet" {
			bad("runs %q, not pgfleet", append(entry, args...))
			continue
		}
		if len(args) == 0 || args[0] != "serve" {
			bad("runs pgfleet %q; want the serve subcommand first", args)
			continue
		}
		cfg, ps := resolveServe(args[1:], env)
		fleet[name] = cfg
		for _, p := range ps {
			bad("%s", p)
		}

		// Ports: listen where the published ports point, on a reachable address.
		published := map[string]bool{}
		for _, p := range ports {
			published[p.container] = true
		}
		ownPorts := map[string]string{}
		for _, a := range []struct{ flag, addr string }{{"--listen", cfg.listen}, {"--metrics-listen", cfg.metrics}} {
			if a.addr == "" {
				continue
			}
			host, port, err := net.SplitHostPort(a.addr)
			if err != nil {
				bad("%s %q: %v", a.flag, a.addr, err)
				continue
			}
			if host == "localhost" || net.ParseIP(host) != nil && net.ParseIP(host).IsLoopback() {
				bad("%s %s is a loopback address: published ports cannot reach it inside the container; use 0.0.0.0:%s", a.flag, a.addr, port)
			}
			ownPorts[port] = a.flag
			if a.flag == "--listen" && !published[port] {
				bad("listens on port %s (--listen %s), but no published port targets it (ports: %v)", port, a.addr, s.Ports)
			}
		}
		for _, p := range ports {
			if ownPorts[p.container] == "" {
				bad("publishes %s:%s, but pgfleet listens on neither --listen %s nor --metrics-listen %q", p.host, p.container, cfg.listen, cfg.metrics)
			}
		}

		// Authentication.
		switch cfg.auth {
		case "scram-sha-256", "md5":
			if len(cfg.users) == 0 {
				bad("auth %s needs at least one --user name:password", cfg.auth)
			}
		case "trust":
			if len(ports) > 0 {
				bad("auth trust on a published port lets anyone connect; use --auth=scram-sha-256 with --user")
			}
		default:
			bad("unknown auth method %q", cfg.auth)
		}

		// Workers: existing postgres services, on their port, with the
		// right password, waited for.
		if len(cfg.workers) == 0 {
			bad("has no --worker (nor PGFLEET_WORKERS)")
		}
		deps := s.dependsOn()
		for _, w := range cfg.workers {
			host, port, err := net.SplitHostPort(w)
			if err != nil {
				bad("--worker %q: %v", w, err)
				continue
			}
			ws, ok := cf.Services[host]
			if !ok || ws == nil {
				bad("--worker %s names no service in the compose file (services: %s)", w, strings.Join(names, ", "))
				continue
			}
			if !ws.isWorker() {
				bad("--worker %s names service %s, which does not run the postgres image (image %q)", w, host, ws.Image)
				continue
			}
			wenv, _ := ws.environment()
			if want, err := ws.postgresPort(wenv); err != nil {
				bad("worker %s: %v", host, err)
			} else if port != want {
				bad("--worker %s uses port %s, but %s's postgres listens on %s", w, port, host, want)
			}
			switch cond, ok := deps[host]; {
			case !ok:
				bad("points at worker %s but its depends_on does not list it", host)
			case cond != "service_healthy":
				bad("depends_on %s with condition %s; want service_healthy so clients are not accepted before the worker is ready", host, cond)
			case !ws.hasHealthcheck():
				bad("depends_on %s being healthy, but %s has no healthcheck", host, host)
			}
			if wenv["POSTGRES_HOST_AUTH_METHOD"] == "trust" {
				continue
			}
			super := wenv["POSTGRES_USER"]
			if super == "" {
				super = "postgres"
			}
			pw, ok := cfg.users[super]
			if !ok {
				pw = cfg.workerPassword
			}
			switch {
			case pw == "":
				bad("has no password for user %s on worker %s: add --user %s:<POSTGRES_PASSWORD of %s>", super, host, super, host)
			case pw != wenv["POSTGRES_PASSWORD"]:
				bad("connects to %s as %s with password %q, but %s has POSTGRES_PASSWORD %q", host, super, pw, host, wenv["POSTGRES_PASSWORD"])
			}
		}
	}
	if coordinators == 0 {
		problems = append(problems, "compose file has no coordinator service (one with build: or a pgfleet image)")
	}
	problems = append(problems, checkFleet(fleet)...)
	for _, name := range names {
		if s := cf.Services[name]; s != nil && s.isPrometheus() {
			problems = append(problems, checkPrometheus(name, s, fleet, fsys)...)
		}
	}
	return problems
}

// isPrometheus: the service runs Prometheus.
func (s *composeService) isPrometheus() bool {
	return strings.Contains(s.Image, "prom/prometheus")
}

// checkPrometheus: a Prometheus service mounts a configuration from the
// compose directory that scrapes every coordinator at its metrics port,
// and nothing else.
func checkPrometheus(name string, s *composeService, fleet map[string]serveConfig, fsys fs.FS) []string {
	var src string
	for _, v := range s.Volumes {
		from, rest, _ := strings.Cut(fmt.Sprint(v), ":")
		if to, _, _ := strings.Cut(rest, ":"); to == "/etc/prometheus/prometheus.yml" {
			src = strings.TrimPrefix(from, "./")
		}
	}
	if src == "" {
		return []string{name + ": mounts no configuration at /etc/prometheus/prometheus.yml"}
	}
	data, err := fs.ReadFile(fsys, src)
	if err != nil {
		return []string{fmt.Sprintf("%s: its configuration %s: %v", name, src, err)}
	}
	var cfg struct {
		ScrapeConfigs []struct {
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		return []string{fmt.Sprintf("%s: %s does not parse: %v", name, src, err)}
	}
	want := map[string]bool{}
	for coord, sc := range fleet {
		if _, port, err := net.SplitHostPort(sc.metrics); err == nil {
			want[net.JoinHostPort(coord, port)] = true
		}
	}
	var problems []string
	for _, c := range cfg.ScrapeConfigs {
		for _, st := range c.StaticConfigs {
			for _, t := range st.Targets {
				if !want[t] {
					problems = append(problems, fmt.Sprintf("%s: %s scrapes %s, which is no coordinator's --metrics-listen", name, src, t))
				}
				delete(want, t)
			}
		}
	}
	for t := range want {
		problems = append(problems, fmt.Sprintf("%s: %s does not scrape %s", name, src, t))
	}
	sort.Strings(problems)
	return problems
}

// checkFleet: several coordinators are one fleet: each gossips, each --join
// names another coordinator service at its gossip port, and every one is
// reached from the others through the joins.
func checkFleet(fleet map[string]serveConfig) []string {
	if len(fleet) < 2 {
		return nil
	}
	var problems []string
	linked := map[string][]string{}
	for name, cfg := range fleet {
		if cfg.gossip == "" {
			problems = append(problems, fmt.Sprintf("%s: no --gossip: it is not part of the fleet (catalog changes reach it only by polling, cancel requests are not forwarded)", name))
			continue
		}
		for _, j := range cfg.join {
			host, port, err := net.SplitHostPort(j)
			target, ok := fleet[host]
			_, gport, _ := net.SplitHostPort(target.gossip)
			switch {
			case err != nil:
				problems = append(problems, fmt.Sprintf("%s: --join %q is not host:port", name, j))
			case !ok:
				problems = append(problems, fmt.Sprintf("%s: --join %q names no coordinator service", name, j))
			case port != gport:
				problems = append(problems, fmt.Sprintf("%s: --join %q, but %s gossips on port %s", name, j, host, gport))
			default:
				linked[name] = append(linked[name], host)
				linked[host] = append(linked[host], name)
			}
		}
	}
	var first string
	for name := range fleet {
		if first == "" || name < first {
			first = name
		}
	}
	seen := map[string]bool{first: true}
	for todo := []string{first}; len(todo) > 0; todo = todo[1:] {
		for _, n := range linked[todo[0]] {
			if !seen[n] {
				seen[n] = true
				todo = append(todo, n)
			}
		}
	}
	for name := range fleet {
		if !seen[name] {
			problems = append(problems, fmt.Sprintf("%s: not joined to %s's fleet (no --join linking them)", name, first))
		}
	}
	return problems
}

// ---- Dockerfile ----

type dockerStage struct {
	name, base string
	workdir    string
	env        map[string]string
	user       string
	entrypoint []string
	cmd        []string
	runs       []string
	copies     [][]string // COPY arguments, flags included
}

// parseDockerfile understands what this repository's Dockerfile uses:
// FROM ... AS, WORKDIR, ENV, USER, RUN, COPY, ENTRYPOINT and CMD, with
// backslash continuations and comments.
func parseDockerfile(text string) ([]*dockerStage, error) {
	var stages []*dockerStage
	var logical []string
	var cur strings.Builder
	for _, line := range strings.Split(text, "\n") {
		trim := strings.TrimSpace(line)
		if strings.HasPrefix(trim, "#") {
			continue
		}
		if strings.HasSuffix(trim, `\`) {
			cur.WriteString(strings.TrimSuffix(trim, `\`) + " ")
			continue
		}
		cur.WriteString(trim)
		if l := strings.TrimSpace(cur.String()); l != "" {
			logical = append(logical, l)
		}
		cur.Reset()
	}
	for _, l := range logical {
		instr, rest, _ := strings.Cut(l, " ")
		instr = strings.ToUpper(instr)
		rest = strings.TrimSpace(rest)
		if instr == "FROM" {
			f := strings.Fields(rest)
			for len(f) > 0 && strings.HasPrefix(f[0], "--") {
				f = f[1:]
			}
			if len(f) == 0 {
				return nil, fmt.Errorf("FROM without an image")
			}
			st := &dockerStage{base: f[0], env: map[string]string{}, workdir: "/"}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				st.name = f[2]
			}
			stages = append(stages, st)
			continue
		}
		if len(stages) == 0 {
			if instr == "ARG" {
				continue
			}
			return nil, fmt.Errorf("%s before the first FROM", instr)
		}
		st := stages[len(stages)-1]
		switch instr {
		case "WORKDIR":
			st.workdir = inDir(st.workdir, rest)
		case "ENV":
			f, err := shellFields(rest)
			if err != nil {
				return nil, fmt.Errorf("ENV: %v", err)
			}
			if len(f) == 2 && !strings.Contains(f[0], "=") { // legacy ENV key value
				st.env[f[0]] = f[1]
				break
			}
			for _, kv := range f {
				k, v, _ := strings.Cut(kv, "=")
				st.env[k] = v
			}
		case "USER":
			st.user = rest
		case "RUN":
			st.runs = append(st.runs, rest)
		case "COPY":
			f := strings.Fields(rest)
			st.copies = append(st.copies, f)
		case "ENTRYPOINT", "CMD":
			var argv []string
			if strings.HasPrefix(rest, "[") {
				if err := json.Unmarshal([]byte(rest), &argv); err != nil {
					return nil, fmt.Errorf("%s %s: %v", instr, rest, err)
				}
			} else {
				argv = []string{"/bin/sh", "-c", rest}
			}
			if instr == "ENTRYPOINT" {
				st.entrypoint = argv
				st.cmd = nil // a new ENTRYPOINT resets an inherited CMD
			} else {
				st.cmd = argv
			}
		}
	}
	if len(stages) == 0 {
		return nil, fmt.Errorf("no FROM")
	}
	return stages, nil
}

// checkDockerfile returns the final stage and the problems with the
// Dockerfile: the final stage must run pgfleet, built from ./cmd/pgfleet by
// an earlier stage with cgo, on a glibc image, as a non-root user.
func checkDockerfile(name, text string) (*dockerStage, []string) {
	var problems []string
	bad := func(format string, args ...any) {
		problems = append(problems, name+": "+fmt.Sprintf(format, args...))
	}
	stages, err := parseDockerfile(text)
	if err != nil {
		bad("does not parse: %v", err)
		return nil, problems
	}
	final := stages[len(stages)-1]

	// The build stage and where it puts the binary.
	builder, output := -1, ""
	for i, st := range stages[:len(stages)-1] {
		for _, run := range st.runs {
			f := strings.Fields(run)
			if !strings.Contains(run, "go build") || !slices.ContainsFunc(f, func(a string) bool {
				return a == "./cmd/pgfleet" || a == "github.com/pgfleet/pgfleet/cmd/pgfleet"
			}) {
				continue
			}
			builder = i
			output = inDir(st.workdir, "pgfleet")
			if j := slices.Index(f, "-o"); j >= 0 && j+1 < len(f) {
				output = inDir(st.workdir, f[j+1])
			}
			if strings.Contains(run, "CGO_ENABLED=0") || st.env["CGO_ENABLED"] == "0" {
				bad("builds with CGO_ENABLED=0, but pgfleet needs cgo (the SQL parser is C)")
			}
		}
	}
	if builder < 0 {
		bad("no build stage runs go build ./cmd/pgfleet (a RUN in a stage before the final one)")
	}

	// The final stage.
	switch {
	case final.base == "scratch" || strings.Contains(final.base, "alpine") || strings.Contains(final.base, "distroless/static"):
		bad("final stage is FROM %s, which lacks the glibc a cgo build of pgfleet needs; use debian:bookworm-slim", final.base)
	}
	if u, _, _ := strings.Cut(final.user, ":"); u == "" || u == "root" || u == "0" {
		bad("final stage runs as root (USER %q); add a non-root USER", final.user)
	}
	if len(final.entrypoint) == 0 {
		bad("final stage has no ENTRYPOINT; want ENTRYPOINT [\".../pgfleet\"]")
		return final, problems
	}
	entry := final.entrypoint[0]
	if path.Base(entry) != "pgfleet" {
		b, _ := json.Marshal(final.entrypoint)
		bad("final stage ENTRYPOINT %s does not run pgfleet", b)
		return final, problems
	}
	if builder >= 0 {
		from := map[string]bool{strconv.Itoa(builder): true}
		if n := stages[builder].name; n != "" {
			from[n] = true
		}
		copied := slices.ContainsFunc(final.copies, func(f []string) bool {
			var src []string
			ok := false
			for _, a := range f {
				if v, isFrom := strings.CutPrefix(a, "--from="); isFrom {
					ok = from[v]
				} else if !strings.HasPrefix(a, "--") {
					src = append(src, a)
				}
			}
			if !ok || len(src) < 2 {
				return false
			}
			dst := src[len(src)-1]
			if !slices.Contains(src[:len(src)-1], output) {
				return false
			}
			return dst == entry || path.Clean(dst) == path.Dir(entry) && path.Base(output) == path.Base(entry)
		})
		if !copied {
			stage := stages[builder].name
			if stage == "" {
				stage = strconv.Itoa(builder)
			}
			bad("final stage does not COPY --from=%s %s to %s, where its ENTRYPOINT expects the binary", stage, output, entry)
		}
	}
	return final, problems
}

// inDir resolves p against the directory dir, as WORKDIR and go build -o do.
func inDir(dir, p string) string {
	if path.IsAbs(p) {
		return path.Clean(p)
	}
	return path.Join(dir, p)
}

// shellFields splits a command line into words the way compose and ENV do:
// on spaces, with single and double quotes and backslash escapes.
func shellFields(s string) ([]string, error) {
	var out []string
	var cur strings.Builder
	inWord := false
	var quote byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0 && c == quote:
			quote = 0
		case quote == '\'':
			cur.WriteByte(c)
		case c == '\\' && i+1 < len(s):
			i++
			cur.WriteByte(s[i])
			inWord = true
		case quote == '"':
			cur.WriteByte(c)
		case c == '\'' || c == '"':
			quote = c
			inWord = true
		case c == ' ' || c == '\t' || c == '\n':
			if inWord {
				out = append(out, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unterminated quote in %q", s)
	}
	if inWord {
		out = append(out, cur.String())
	}
	return out, nil
}
