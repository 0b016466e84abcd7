package app

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/moenda/moenda/adapters/outbox"
	"github.com/moenda/moenda/adapters/testenv"
)

// The files Prometheus and Grafana load (configs/observability), from app/.
const (
	alertRulesFile = "../configs/observability/alerts.yml"
	dashboardsGlob = "../configs/observability/grafana/dashboards/*.json"
)

// A real Prometheus scraping a running moenda answers every query of the
// dashboard, and has series for every metric the alert rules read, which
// it evaluates without error. The process runs the probe plugin on
// RabbitMQ, the polling reader, with a handler run that succeeds and one
// that ends in the dead-letter queue, so the metrics that only exist once
// something happened (dead letters by reason) exist.
//
// Not checked here: moenda_relay_slot_retained_bytes, which only a
// process whose relays stream from a replication slot (outbox.reader
// logical) reports. Creating a slot waits for every write transaction
// open on the whole server, which the tests that share PostgreSQL hold
// for seconds, so the logical reader's tests run alone:
// TestPrometheusReadsEveryQueryOverTheLogicalReaderAlone checks it there.
// Kafka adds no metric of its own: a relay to Kafka reports the same
// moenda_relay_* under its group, and the queue depths are RabbitMQ's.
func TestPrometheusReadsEveryQuery(t *testing.T) {
	checkPrometheusQueries(t, outbox.ReaderPoll, map[string]string{
		"moenda_relay_slot_retained_bytes": "only relays that read logical report it; TestPrometheusReadsEveryQueryOverTheLogicalReaderAlone checks it",
	})
}

// The same with the logical reader, which reports its slot's metrics.
func TestPrometheusReadsEveryQueryOverTheLogicalReaderAlone(t *testing.T) {
	testenv.PostgresAlone(t)
	checkPrometheusQueries(t, outbox.ReaderLogical, nil)
}

// checkPrometheusQueries starts moenda with reader, and Prometheus
// scraping it every second with the alert rules loaded, then requires
// series for every query (see queriesToCheck), the metrics of
// notChecked excepted, with why.
func checkPrometheusQueries(t *testing.T, reader string, notChecked map[string]string) {
	bin := prometheusBinary(t)
	s := newProbeStack(t)
	// The failure ledger on: the dead letter below is counted unresolved.
	s.extra = append(s.extra, "MOENDA_METRICS__POLL_INTERVAL=1s", "MOENDA_OUTBOX__READER="+reader, "MOENDA_FAILURES__ENABLED=true", "MOENDA_FAILURES__LINGER=20ms")
	p := s.start(t)
	publish(t, p, "probe.work.hit.v1", probeOrder{})
	publish(t, p, "probe.work.hit.v1", probeOrder{Fail: -1}) // dead-lettered
	publish(t, p, "probe.work.other.v1", probeOrder{})       // ignored

	prom := startPrometheus(t, bin, strings.TrimPrefix(p.base, "http://"))
	prom.await(t, 30*time.Second, "a scrape of moenda", `up{job="moenda"} == 1`)
	// The dashboard's rates need a few samples within rateWindow.
	prom.await(t, 30*time.Second, "three scrapes", `count_over_time(up{job="moenda"}[`+rateWindow+`]) >= 3`)
	prom.awaitRules(t, 30*time.Second)

	queries := queriesToCheck(t)
	for _, q := range queries {
		t.Logf("%s: %s", q.from, q.query)
	}
	// Some series appear a moment after the first scrapes (the dead
	// letter, the gauges polled every second): ask until each answered
	// or the time is up, then name every query that returned nothing.
	empty := slices.Clone(queries)
	deadline := time.Now().Add(30 * time.Second)
	for len(empty) > 0 && time.Now().Before(deadline) {
		empty = slices.DeleteFunc(empty, func(q promQuery) bool {
			return notChecked[q.metric] == "" && prom.series(t, q.query) > 0
		})
		empty = slices.DeleteFunc(empty, func(q promQuery) bool {
			if why := notChecked[q.metric]; why != "" {
				t.Logf("not checked: %s (%s): %s", q.query, q.from, why)
				return true
			}
			return false
		})
		if len(empty) > 0 {
			time.Sleep(time.Second)
		}
	}
	for _, q := range empty {
		t.Errorf("no series for %s (%s)", q.query, q.from)
	}
	if len(empty) > 0 {
		t.Errorf("%d of %d queries returned nothing, listed above; moenda's /metrics:\n%s", len(empty), len(queries), scrape(t, p))
	}
}

// prometheusBinary is the path of Prometheus's server (Debian's
// prometheus package, which .ci/services installs). Without it the test
// is skipped, except in CI, where it fails.
func prometheusBinary(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err == nil {
		return bin
	}
	msg := "no prometheus binary on PATH (Debian: apt-get install --no-install-recommends prometheus, or run .ci/services)"
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// rateWindow stands for Grafana's $__rate_interval and the dashboard's
// other interval variables: with a scrape every second, ten samples.
const rateWindow = "10s"

// promQuery is one query to check, where it came from, and the metric it
// stands for (for a rule; "" for a dashboard query).
type promQuery struct {
	from, query, metric string
}

// queriesToCheck are the dashboards' queries and the metrics the alert
// rules read.
//
// A dashboard query is sent as the panel sends it, its variables set to
// what the dashboard's "All" stands for and its intervals to rateWindow;
// "expr or vector(0)" is sent as expr alone, since vector(0) answers
// whatever the metrics are. Every query must return series.
//
// An alert rule's expression returns series only while its alert fires,
// which a healthy moenda must not do; every rule has a threshold, an
// offset comparison or an "unless". So each rule is checked in two ways:
// Prometheus evaluates it without error (awaitRules), and every metric
// it reads (each moenda_* name in its expression, as every rule reads
// moenda's own metrics) is queried by its bare selector, which must
// return series. A rule that names no moenda_* metric fails the test,
// since it could not be checked this way.
func queriesToCheck(t *testing.T) []promQuery {
	t.Helper()
	var queries []promQuery
	paths, err := filepath.Glob(dashboardsGlob)
	if err != nil || len(paths) == 0 {
		t.Fatalf("no dashboards at %s: %v", dashboardsGlob, err)
	}
	for _, path := range paths {
		queries = append(queries, dashboardQueries(t, path)...)
	}

	raw, err := os.ReadFile(alertRulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(raw, &rules); err != nil {
		t.Fatalf("%s: %v", alertRulesFile, err)
	}
	metricName := regexp.MustCompile(`\bmoenda_[a-zA-Z0-9_]+`)
	n := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			n++
			names := slices.Compact(slices.Sorted(slices.Values(metricName.FindAllString(r.Expr, -1))))
			if len(names) == 0 {
				t.Errorf("alert %s reads no moenda_* metric: this test cannot check it", r.Alert)
			}
			for _, name := range names {
				queries = append(queries, promQuery{from: "alert " + r.Alert, query: name, metric: name})
			}
		}
	}
	if n == 0 {
		t.Fatalf("%s has no rules", alertRulesFile)
	}
	return queries
}

// dashboardQueries are the queries of one Grafana dashboard: each
// panel's "expr", and each template variable's label_values(metric,
// label) as the query Grafana makes of it.
func dashboardQueries(t *testing.T, path string) []promQuery {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var board struct {
		Templating struct {
			List []struct {
				Name     string `json:"name"`
				Query    any    `json:"query"`
				AllValue string `json:"allValue"`
			} `json:"list"`
		} `json:"templating"`
	}
	var doc any
	if err := json.Unmarshal(raw, &board); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	_ = json.Unmarshal(raw, &doc)
	name := filepath.Base(path)

	pairs := []string{"$__rate_interval", rateWindow, "${__rate_interval}", rateWindow,
		"$__interval", rateWindow, "${__interval}", rateWindow, "$__range", rateWindow, "${__range}", rateWindow}
	var queries []promQuery
	labelValues := regexp.MustCompile(`^label_values\((\w+),\s*(\w+)\)$`)
	for _, v := range board.Templating.List {
		if v.AllValue == "" {
			t.Errorf("%s: variable %s has no allValue to stand for All", name, v.Name)
		}
		pairs = append(pairs, "${"+v.Name+"}", v.AllValue, "$"+v.Name, v.AllValue, "[["+v.Name+"]]", v.AllValue)
		if q, ok := v.Query.(string); ok {
			if m := labelValues.FindStringSubmatch(q); m != nil {
				queries = append(queries, promQuery{from: name + ", variable " + v.Name, query: fmt.Sprintf("count by (%s) (%s)", m[2], m[1])})
			} else {
				t.Errorf("%s: variable %s: a query this test does not know: %q", name, v.Name, q)
			}
		}
	}
	set := strings.NewReplacer(pairs...)

	var walk func(title string, node any)
	walk = func(title string, node any) {
		switch n := node.(type) {
		case map[string]any:
			if s, ok := n["title"].(string); ok {
				title = s
			}
			for k, v := range n {
				if expr, ok := v.(string); ok && k == "expr" {
					q := strings.TrimSuffix(set.Replace(expr), " or vector(0)")
					if strings.Contains(q, "$") {
						t.Errorf("%s, panel %q: a variable this test does not set: %s", name, title, q)
					}
					queries = append(queries, promQuery{from: name + ", panel " + title, query: q})
					continue
				}
				walk(title, v)
			}
		case []any:
			for _, v := range n {
				walk(title, v)
			}
		}
	}
	walk("", doc)
	if len(queries) == 0 {
		t.Fatalf("%s has no queries", name)
	}
	return queries
}

// promServer is a Prometheus server started for one test.
type promServer struct {
	base string
	logs *testenv.Buffer
}

// startPrometheus runs bin on a free loopback port with the alert rules
// loaded, scraping target (host:port) every second as job moenda, until
// the test ends.
func startPrometheus(t *testing.T, bin, target string) promServer {
	t.Helper()
	rules, err := filepath.Abs(alertRulesFile)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	config := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 900ms
  evaluation_interval: 1s
rule_files: [%q]
scrape_configs:
  - job_name: moenda
    metrics_path: /metrics
    static_configs:
      - targets: [%q]
`, rules, target)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := testenv.ClosedAddr(t)
	prom := promServer{base: "http://" + addr, logs: &testenv.Buffer{}}
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = prom.logs, prom.logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		if t.Failed() && prom.logs.String() != "" {
			t.Logf("prometheus's log:\n%s", prom.logs)
		}
	})
	testenv.Eventually(t, 30*time.Second, "prometheus ready", func() bool {
		select {
		case <-done:
			t.Fatalf("prometheus exited while starting:\n%s", prom.logs)
		default:
		}
		resp, err := http.Get(prom.base + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return prom
}

// get decodes the data of an API answer into v, failing the test on an
// error answer.
func (p promServer) get(t *testing.T, path string, v any) {
	t.Helper()
	resp, err := http.Get(p.base + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var answer struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	if answer.Status != "success" {
		t.Fatalf("GET %s = %d %s: %s", path, resp.StatusCode, answer.Status, answer.Error)
	}
	if err := json.Unmarshal(answer.Data, v); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
}

// series runs query now and counts the series it returns; a query
// Prometheus refuses fails the test.
func (p promServer) series(t *testing.T, query string) int {
	t.Helper()
	var data struct {
		ResultType string            `json:"resultType"`
		Result     []json.RawMessage `json:"result"`
	}
	p.get(t, "/api/v1/query?query="+url.QueryEscape(query), &data)
	if data.ResultType != "vector" && data.ResultType != "matrix" {
		t.Fatalf("%s: a %s, not series", query, data.ResultType)
	}
	return len(data.Result)
}

// await waits until query returns series.
func (p promServer) await(t *testing.T, timeout time.Duration, what, query string) {
	t.Helper()
	testenv.Eventually(t, timeout, what+" ("+query+")", func() bool { return p.series(t, query) > 0 })
}

// awaitRules waits until Prometheus has loaded every rule of the rules
// file and evaluated each without error.
func (p promServer) awaitRules(t *testing.T, timeout time.Duration) {
	t.Helper()
	var bad []string
	ok := func() bool {
		var data struct {
			Groups []struct {
				Rules []struct {
					Name      string `json:"name"`
					Health    string `json:"health"`
					LastError string `json:"lastError"`
				} `json:"rules"`
			} `json:"groups"`
		}
		p.get(t, "/api/v1/rules", &data)
		bad = nil
		n := 0
		for _, g := range data.Groups {
			for _, r := range g.Rules {
				n++
				if r.Health != "ok" {
					bad = append(bad, fmt.Sprintf("%s: %s %s", r.Name, r.Health, r.LastError))
				}
			}
		}
		if n == 0 {
			bad = append(bad, "no rules loaded")
		}
		return len(bad) == 0
	}
	deadline := time.Now().Add(timeout)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("the alert rules are not all evaluated without error after %s:\n%s", timeout, strings.Join(bad, "\n"))
		}
		time.Sleep(200 * time.Millisecond)
	}
}
