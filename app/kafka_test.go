package app

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/moenda/moenda/adapters/testenv"
	"github.com/moenda/moenda/configs"
)

// kafkaEnv is the configuration of a test that uses Kafka: a database, a
// vhost and a cluster of its own.
func kafkaEnv(t *testing.T, k testenv.KafkaCluster, environ ...string) (testenv.Database, []string) {
	t.Helper()
	db := testenv.EmptyPostgres(t)
	vhost := testenv.RabbitMQ(t)
	return db, append([]string{
		"MOENDA_POSTGRES__URL=" + db.URL, "MOENDA_AMQP__URL=" + vhost.URL,
		"MOENDA_KAFKA__BROKERS=" + strings.Join(k.Config.Brokers, ","),
		"MOENDA_KAFKA__TOPIC_PREFIX=" + k.Config.TopicPrefix,
	}, environ...)
}

// concludeTasks creates and concludes n tasks of user and returns their
// ids.
func concludeTasks(t *testing.T, base string, user, n int) []int {
	t.Helper()
	var ids []int
	for range n {
		code, task := call(t, "POST", base+"/tarefas", fmt.Sprintf(`{"usuario_id": %d, "titulo": "t"}`, user))
		if code != http.StatusCreated {
			t.Fatalf("POST /tarefas = %d %v", code, task)
		}
		id := int(task["id"].(float64))
		if code, body := call(t, "PATCH", fmt.Sprintf("%s/tarefas/%d/concluir", base, id), fmt.Sprintf(`{"usuario_id": %d}`, user)); code != http.StatusOK {
			t.Fatalf("PATCH = %d %v", code, body)
		}
		ids = append(ids, id)
	}
	return ids
}

// counted is how many tarefa.concluida events the analytics projection
// holds, read over HTTP.
func counted(t *testing.T, base string) int {
	t.Helper()
	code, body := call(t, "GET", base+"/analytics/contagens", "")
	if code != http.StatusOK {
		t.Fatalf("GET /analytics/contagens = %d %v", code, body)
	}
	n := 0
	for _, row := range body["por_dia"].([]any) {
		r := row.(map[string]any)
		if r["evento"] == "tarefa.concluida" {
			n += int(r["total"].(float64))
		}
	}
	return n
}

// facts is the projection's rows, as event id -> day, read from the
// database.
func facts(t *testing.T, url string) map[string]string {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	rows, err := pool.Query(context.Background(), `SELECT event_id, evento || ' ' || ocorrido_em::date::text FROM analytics_eventos`)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for rows.Next() {
		var id, v string
		if err := rows.Scan(&id, &v); err != nil {
			t.Fatal(err)
		}
		out[id] = v
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestTarefasOverKafka(t *testing.T) {
	k := testenv.Kafka(t)
	_, environ := kafkaEnv(t, k, "MOENDA_BROKER__KIND=kafka")
	p := start(t, "test", environ...)
	tarefasFlow(t, p.base)
	want := "Tarefa 'Escrever relatório' foi concluída pelo usuário 1"
	testenv.Eventually(t, 30*time.Second, "the notification", func() bool { return strings.Contains(p.logs.String(), want) })
	testenv.Eventually(t, 30*time.Second, "the projection to count both conclusions", func() bool { return counted(t, p.base) == 2 })
}

func TestAnalyticsReadsRabbitMQWithTheFlagOff(t *testing.T) {
	p, _ := startAMQP(t)
	concludeTasks(t, p.base, 3, 5)
	testenv.Eventually(t, 20*time.Second, "the projection to count 5 conclusions", func() bool { return counted(t, p.base) == 5 })
}

func TestAnalyticsReadsKafkaBesideRabbitMQ(t *testing.T) {
	k := testenv.Kafka(t)
	_, environ := kafkaEnv(t, k, "MOENDA_ANALYTICS__KAFKA__ENABLED=true")
	p := start(t, "test", environ...)
	concludeTasks(t, p.base, 4, 20)
	testenv.Eventually(t, 30*time.Second, "the projection to count 20 conclusions", func() bool { return counted(t, p.base) == 20 })
	testenv.Eventually(t, 30*time.Second, "20 notifications over RabbitMQ", func() bool { return strings.Count(p.logs.String(), "foi concluída pelo usuário 4") == 20 })
	if _, err := sarama.NewClient(k.Config.Brokers, sarama.NewConfig()); err != nil {
		t.Fatal(err)
	}
	groups := consumerGroups(t, k)
	if !groups[k.Config.Group("analytics")] {
		t.Fatalf("consumer groups on the cluster = %v, want one named analytics", groups)
	}
}

// consumerGroups lists the groups of the cluster.
func consumerGroups(t *testing.T, k testenv.KafkaCluster) map[string]bool {
	t.Helper()
	sc := sarama.NewConfig()
	sc.Version = sarama.V3_6_0_0
	admin, err := sarama.NewClusterAdmin(k.Config.Brokers, sc)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	list, err := admin.ListConsumerGroups()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for g := range list {
		out[g] = true
	}
	return out
}

// freePort returns a local TCP port nobody listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func TestReplayOnAFreshMachineRebuildsTheLiveCounts(t *testing.T) {
	addr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	db := testenv.EmptyPostgres(t)
	vhost := testenv.RabbitMQ(t)
	environ := []string{"MOENDA_POSTGRES__URL=" + db.URL, "MOENDA_AMQP__URL=" + vhost.URL,
		"MOENDA_KAFKA__BROKERS=" + addr, "MOENDA_KAFKA__EMBEDDED=true", "MOENDA_ANALYTICS__KAFKA__ENABLED=true"}

	// Live: the embedded cluster lives and dies with this platform.
	ctx, stop := context.WithCancel(context.Background())
	cfg, err := Load(Source{Env: "test", Files: configs.FS, Environ: append(environ, "MOENDA_HTTP__ADDR=127.0.0.1:0")}, registry(t))
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(ctx, cfg, testenv.Logger())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	<-p.Running()
	base := "http://" + p.Addr()
	concludeTasks(t, base, 5, 12)
	testenv.Eventually(t, 30*time.Second, "the live projection to count 12", func() bool { return counted(t, base) == 12 })
	live := facts(t, db.URL)
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// Damage the projection so the replay has something to repair.
	pool, err := pgxpool.New(context.Background(), db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(context.Background(), `DELETE FROM analytics_eventos WHERE event_id IN (SELECT event_id FROM analytics_eventos LIMIT 5)`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(context.Background(), `INSERT INTO analytics_eventos VALUES ('not-an-event', 'tarefa.concluida', now(), NULL)`); err != nil {
		t.Fatal(err)
	}

	// The cluster is gone with the platform: the replay starts its own,
	// fills it from the outbox, and rebuilds. Twice: the second time the
	// replay group has committed offsets, which the replay resets.
	for round := 1; round <= 2; round++ {
		code, stdout, stderr := run(t, environ, "--env", "test", "replay", "analytics", "--from", "earliest")
		if code != 0 {
			t.Fatalf("round %d: replay exit %d\nstdout: %s\nstderr: %s", round, code, stdout, stderr)
		}
		if !strings.Contains(stdout, "replay analytics: 12 events read from earliest") {
			t.Fatalf("round %d: replay summary = %q", round, stdout)
		}
		if got := facts(t, db.URL); !equalMaps(got, live) {
			t.Fatalf("round %d: after the replay the projection holds %d facts, the live one held %d:\n%v\n%v", round, len(got), len(live), got, live)
		}
	}
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
