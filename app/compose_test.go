package app

import (
	"os"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/moenda/moenda/configs"
)

// TestComposeFile checks docker-compose.yml without a Docker engine: the
// three services, their healthchecks and start order, and that moenda's
// environment there loads as a valid configuration.
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
			Environment map[string]string `yaml:"environment"`
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
	pg, mq, app := compose.Services["postgres"], compose.Services["rabbitmq"], compose.Services["moenda"]
	if pg.Image != "postgres:16" || !strings.Contains(mq.Image, "management") || app.Build != "." {
		t.Fatalf("services: postgres %q, rabbitmq %q, moenda build %q", pg.Image, mq.Image, app.Build)
	}
	if k := compose.Services["kafka"]; !strings.HasPrefix(k.Image, "apache/kafka:") || len(k.Profiles) != 1 || k.Profiles[0] != "analytics" {
		t.Fatalf("kafka: image %q, profiles %v; want apache/kafka behind the analytics profile", k.Image, k.Profiles)
	}
	for name, s := range compose.Services {
		if len(s.Healthcheck.Test) == 0 {
			t.Errorf("service %s has no healthcheck", name)
		}
	}
	for _, dep := range []string{"postgres", "rabbitmq"} {
		if app.DependsOn[dep].Condition != "service_healthy" {
			t.Errorf("moenda does not wait for %s to be healthy", dep)
		}
	}
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
	if cfg.HTTP.Addr != "0.0.0.0:8080" || !strings.Contains(cfg.Postgres.URL, "@postgres:5432/") || !strings.Contains(cfg.AMQP.URL, "@rabbitmq:5672/") {
		t.Fatalf("compose config: %+v %q %q", cfg.HTTP, cfg.Postgres.URL, cfg.AMQP.URL)
	}
}
