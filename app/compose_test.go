package app

import (
	"encoding/json"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/moenda/moenda/configs"
)

// TestComposeFile checks docker-compose.yml without a Docker engine: the
// services, moenda's three roles from one image (workers with no host
// port, so that they scale), their healthchecks and start order, that
// moenda's environment there loads as a valid configuration, and the observability
// profile: Prometheus and Grafana, the files they mount, and a dashboard
// that charts every metric moenda serves.
func TestComposeFile(t *testing.T) {
	raw, err := os.ReadFile("../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var compose struct {
		Services map[string]struct {
			Image       string            `yaml:"image"`
			Profiles    []string          `yaml:"profiles"`
			Build       string            `yaml:"build"`
			Command     []string          `yaml:"command"`
			Environment map[string]string `yaml:"environment"`
			Volumes     []string          `yaml:"volumes"`
			Ports       []string          `yaml:"ports"`
			DependsOn   map[string]struct {
				Condition string `yaml:"condition"`
			} `yaml:"depends_on"`
			Healthcheck struct {
				Test []string `yaml:"test"`
			} `yaml:"healthcheck"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(raw, &compose); err != nil {
		t.Fatal(err)
	}
	pg, mq, app := compose.Services["postgres"], compose.Services["rabbitmq"], compose.Services["api"]
	if pg.Image != "postgres:16" || !strings.Contains(mq.Image, "management") {
		t.Fatalf("services: postgres %q, rabbitmq %q", pg.Image, mq.Image)
	}
	for _, role := range []string{"api", "worker", "relay"} {
		s, ok := compose.Services[role]
		if !ok {
			t.Fatalf("no %s service", role)
		}
		if s.Build != "." || s.Image != app.Image || !slices.Equal(s.Command, []string{"serve", "--role", role}) {
			t.Errorf("%s: build %q, image %q, command %v; want the one image, serve --role %s", role, s.Build, s.Image, s.Command, role)
		}
		if !maps.Equal(s.Environment, app.Environment) {
			t.Errorf("%s's environment differs from api's", role)
		}
		for _, dep := range []string{"postgres", "rabbitmq"} {
			if s.DependsOn[dep].Condition != "service_healthy" {
				t.Errorf("%s does not wait for %s to be healthy", role, dep)
			}
		}
		if role != "api" && len(s.Ports) > 0 {
			t.Errorf("%s publishes %v: a fixed host port keeps it from scaling", role, s.Ports)
		}
	}
	if !slices.Equal(app.Ports, []string{"8080:8080"}) {
		t.Errorf("api publishes %v, want 8080:8080", app.Ports)
	}
	if k := compose.Services["kafka"]; !strings.HasPrefix(k.Image, "apache/kafka:") || len(k.Profiles) != 1 || k.Profiles[0] != "analytics" {
		t.Fatalf("kafka: image %q, profiles %v; want apache/kafka behind the analytics profile", k.Image, k.Profiles)
	}
	for name, s := range compose.Services {
		if len(s.Healthcheck.Test) == 0 {
			t.Errorf("service %s has no healthcheck", name)
		}
	}
	t.Run("observability", func(t *testing.T) {
		// service checks the service name: behind the observability
		// profile, a pinned image of repository, publishing port. It maps
		// each bind mount's container path to its host path, relative to
		// the repository root, after checking that it exists.
		service := func(name, repository, port string) map[string]string {
			s, ok := compose.Services[name]
			if !ok {
				t.Fatalf("no %s service", name)
			}
			if !slices.Equal(s.Profiles, []string{"observability"}) {
				t.Errorf("%s: profiles %v; want [observability]", name, s.Profiles)
			}
			if !strings.HasPrefix(s.Image, repository+":") {
				t.Errorf("%s: image %q", name, s.Image)
			}
			if i := strings.LastIndex(s.Image, ":"); i < 0 || s.Image[i+1:] == "latest" {
				t.Errorf("%s: image %q is not pinned", name, s.Image)
			}
			if !slices.ContainsFunc(s.Ports, func(p string) bool { return strings.HasPrefix(p, port+":") }) {
				t.Errorf("%s does not publish port %s", name, port)
			}
			m := map[string]string{}
			for _, v := range s.Volumes {
				host, rest, _ := strings.Cut(v, ":")
				target, _, _ := strings.Cut(rest, ":")
				if !strings.HasPrefix(host, "./") {
					continue // a named volume
				}
				if _, err := os.Stat(filepath.Join("..", host)); err != nil {
					t.Errorf("%s mounts %s, which the repository lacks: %v", name, host, err)
				}
				m[target] = host
			}
			return m
		}
		// mounted is the host path that service name mounts at target.
		mounted := func(name string, mounts map[string]string, target string) string {
			if mounts[target] == "" {
				t.Fatalf("%s mounts nothing at %s: %v", name, target, mounts)
			}
			return mounts[target]
		}
		readYAML := func(path string, v any) {
			raw, err := os.ReadFile(filepath.Join("..", path))
			if err != nil {
				t.Fatal(err)
			}
			if err := yaml.Unmarshal(raw, v); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
		}

		prom := service("prometheus", "prom/prometheus", "9090")
		promConfig := mounted("prometheus", prom, "/etc/prometheus/prometheus.yml")
		var scrape struct {
			RuleFiles     []string `yaml:"rule_files"`
			ScrapeConfigs []struct {
				JobName        string `yaml:"job_name"`
				MetricsPath    string `yaml:"metrics_path"`
				ScrapeInterval string `yaml:"scrape_interval"`
				DNSSDConfigs   []struct {
					Names []string `yaml:"names"`
					Type  string   `yaml:"type"`
					Port  int      `yaml:"port"`
				} `yaml:"dns_sd_configs"`
			} `yaml:"scrape_configs"`
		}
		readYAML(promConfig, &scrape)
		// Each role's replicas answer its DNS name, one address each.
		scrapesMoenda := false
		for _, j := range scrape.ScrapeConfigs {
			for _, sd := range j.DNSSDConfigs {
				if j.JobName == "moenda" && slices.Equal(sd.Names, []string{"api", "worker", "relay"}) && sd.Type == "A" && sd.Port == 8080 &&
					(j.MetricsPath == "" || j.MetricsPath == "/metrics") {
					scrapesMoenda = true
				}
			}
		}
		if !scrapesMoenda {
			t.Errorf("%s has no job moenda scraping api, worker and relay on 8080/metrics: %+v", promConfig, scrape.ScrapeConfigs)
		}
		// Prometheus reads rule files relative to its configuration: each
		// must be mounted beside it, from beside the file in the repository.
		if !slices.Contains(scrape.RuleFiles, "alerts.yml") {
			t.Errorf("%s does not load the alert rules (rule_files: [alerts.yml]): %v", promConfig, scrape.RuleFiles)
		}
		for _, f := range scrape.RuleFiles {
			if got, want := mounted("prometheus", prom, "/etc/prometheus/"+f), "./"+path.Join(path.Dir(strings.TrimPrefix(promConfig, "./")), f); got != want {
				t.Errorf("prometheus mounts %s at /etc/prometheus/%s; want %s", got, f, want)
			}
		}

		graf := service("grafana", "grafana/grafana", "3000")
		datasources, providers := mounted("grafana", graf, "/etc/grafana/provisioning/datasources"), mounted("grafana", graf, "/etc/grafana/provisioning/dashboards")
		var ds struct {
			Datasources []struct {
				UID  string `yaml:"uid"`
				Type string `yaml:"type"`
				URL  string `yaml:"url"`
			} `yaml:"datasources"`
		}
		readYAML(filepath.Join(datasources, "prometheus.yml"), &ds)
		if len(ds.Datasources) != 1 || ds.Datasources[0].Type != "prometheus" || ds.Datasources[0].URL != "http://prometheus:9090" || ds.Datasources[0].UID == "" {
			t.Fatalf("grafana data sources: %+v; want one prometheus at http://prometheus:9090 with a fixed uid", ds.Datasources)
		}
		uid := ds.Datasources[0].UID
		var prov struct {
			Providers []struct {
				Type    string `yaml:"type"`
				Options struct {
					Path string `yaml:"path"`
				} `yaml:"options"`
			} `yaml:"providers"`
		}
		readYAML(filepath.Join(providers, "moenda.yml"), &prov)
		if len(prov.Providers) != 1 || prov.Providers[0].Type != "file" {
			t.Fatalf("grafana dashboard providers: %+v; want one file provider", prov.Providers)
		}
		dashboards := graf[prov.Providers[0].Options.Path]
		if dashboards == "" {
			t.Fatalf("the dashboard provider reads %q, which grafana does not mount: %v", prov.Providers[0].Options.Path, graf)
		}
		if dashboards != "./configs/observability/grafana/dashboards" {
			t.Errorf("grafana's dashboards come from %s", dashboards)
		}

		raw, err := os.ReadFile(filepath.Join("..", dashboards, "moenda.json"))
		if err != nil {
			t.Fatal(err)
		}
		var dash map[string]any
		if err := json.Unmarshal(raw, &dash); err != nil {
			t.Fatalf("moenda.json: %v", err)
		}
		if dash["uid"] != "moenda" || dash["title"] != "moenda" {
			t.Errorf("dashboard uid %v, title %v; want moenda", dash["uid"], dash["title"])
		}
		// Walk the dashboard for the queries and the data sources it names.
		var exprs []string
		wrongUIDs := map[any]bool{}
		var walk func(v any)
		walk = func(v any) {
			switch v := v.(type) {
			case map[string]any:
				for k, x := range v {
					if e, ok := x.(string); ok && k == "expr" {
						exprs = append(exprs, e)
					}
					if k == "datasource" {
						if d, ok := x.(map[string]any); ok && d["type"] == "prometheus" && d["uid"] != uid {
							wrongUIDs[d["uid"]] = true
						}
					}
					walk(x)
				}
			case []any:
				for _, x := range v {
					walk(x)
				}
			}
		}
		walk(dash)
		if len(wrongUIDs) > 0 {
			t.Errorf("dashboard names Prometheus data sources %v; want only uid %q", wrongUIDs, uid)
		}
		queries := strings.Join(exprs, "\n")
		for _, metric := range []string{
			"moenda_messages_handled_total",
			"moenda_messages_failed_total",
			"moenda_messages_retried_total",
			"moenda_messages_dead_lettered_total",
			"moenda_messages_deduplicated_total",
			"moenda_messages_ignored_total",
			"moenda_handler_duration_seconds_bucket",
			"moenda_relay_rows_published_total",
			"moenda_relay_batches_total",
			"moenda_relay_publish_duration_seconds_bucket",
			"moenda_relay_lag_rows",
			"moenda_relay_lag_seconds",
			"moenda_relay_leader",
			"moenda_outbox_parked_rows",
			"moenda_unrouted_messages",
			"moenda_dead_letter_messages",
			"moenda_http_requests_total",
			"moenda_http_request_duration_seconds_bucket",
			"go_goroutines",
			"go_memstats_heap_alloc_bytes",
			"go_gc_duration_seconds",
			"process_cpu_seconds_total",
			"process_resident_memory_bytes",
		} {
			if !strings.Contains(queries, metric) {
				t.Errorf("the moenda dashboard charts no %s", metric)
			}
		}
		for _, q := range []string{
			"moenda_handler_duration_seconds_bucket",
			"moenda_relay_publish_duration_seconds_bucket",
			"moenda_http_request_duration_seconds_bucket",
		} {
			found := false
			for _, e := range exprs {
				found = found || strings.Contains(e, "histogram_quantile(") && strings.Contains(e, q)
			}
			if !found {
				t.Errorf("the moenda dashboard has no quantile of %s", q)
			}
		}
	})
	var environ []string
	for k, v := range app.Environment {
		// Expand ${VAR:-default} as compose would with VAR unset.
		for strings.Contains(v, "${") {
			i := strings.Index(v, "${")
			j := strings.Index(v[i:], "}") + i
			_, def, _ := strings.Cut(v[i+2:j], ":-")
			v = v[:i] + def + v[j+1:]
		}
		environ = append(environ, k+"="+v)
	}
	if app.Environment["MOENDA_ENV"] != "compose" {
		t.Fatalf("moenda runs with MOENDA_ENV=%q", app.Environment["MOENDA_ENV"])
	}
	cfg, err := Load(Source{Env: "compose", Files: configs.FS, Environ: environ}, registry(t))
	if err != nil {
		t.Fatalf("compose configuration does not load: %v", err)
	}
	if len(cfg.Kafka.Brokers) != 1 || cfg.Kafka.Brokers[0] != "kafka:9092" || cfg.Kafka.Embedded || cfg.Analytics.Kafka.Enabled {
		t.Fatalf("compose kafka config: %+v, analytics %+v; want kafka:9092, not embedded, off unless asked", cfg.Kafka, cfg.Analytics)
	}
	if !cfg.Auth.Enabled {
		t.Fatal("compose publishes the port with auth.enabled false")
	}
	if cfg.HTTP.Addr != "0.0.0.0:8080" || !strings.Contains(cfg.Postgres.URL, "@postgres:5432/") || !strings.Contains(cfg.AMQP.URL, "@rabbitmq:5672/") {
		t.Fatalf("compose config: %+v %q %q", cfg.HTTP, cfg.Postgres.URL, cfg.AMQP.URL)
	}
}
