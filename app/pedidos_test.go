package app

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/moenda/moenda/adapters/testenv"
)

// publishSeed001 publishes a pedido event in seed 001's envelope to the
// pedidos exchange, as the seed's publisher does with any AMQP client.
func publishSeed001(t *testing.T, ch *amqp091.Channel, id, tipo, dados string) {
	t.Helper()
	body := fmt.Sprintf(`{"id":%q,"tipo":%q,"versao":1,"ocorridoEm":%q,"origem":"pedidos","dados":%s,"campoNovo":"ignorado"}`,
		id, tipo, time.Now().UTC().Format(time.RFC3339Nano), dados)
	err := ch.PublishWithContext(context.Background(), "pedidos", tipo, true, false, amqp091.Publishing{
		MessageId: id, Type: tipo, ContentType: "application/json", DeliveryMode: amqp091.Persistent, Body: []byte(body)})
	if err != nil {
		t.Fatal(err)
	}
}

// A seed 001 envelope from a plain AMQP client reserves stock; an extra
// field and a type estoque does not know fail nothing and dead-letter
// nothing.
func TestSeed001ClientReservesStock(t *testing.T) {
	p, vhost := startAMQP(t)
	ch := testenv.Channel(t, vhost.URL)
	dlqs := []func() []amqp091.Delivery{testenv.Consume(t, vhost.URL, "estoque.pedidos.dlq"), testenv.Consume(t, vhost.URL, "analise.pedidos.dlq")}
	publishSeed001(t, ch, uuid.NewString(), "pedido.criado", `{"pedidoId": 981, "itens": [{"produtoId": 7, "quantidade": 2}]}`)
	publishSeed001(t, ch, uuid.NewString(), "pedido.reembolsado", `{"pedidoId": 981}`)
	testenv.Eventually(t, 20*time.Second, "the reservation", func() bool {
		code, body := call(t, "GET", p.base+"/estoque/reservas/981", "")
		return code == http.StatusOK && fmt.Sprint(body["itens"]) == "[map[produto_id:7 quantidade:2]]"
	})
	testenv.Eventually(t, 20*time.Second, "analise to see both types", func() bool {
		code, body := call(t, "GET", p.base+"/analise/pedidos", "")
		tipos, _ := body["por_tipo"].(map[string]any)
		return code == http.StatusOK && tipos["pedido.criado"] == float64(1) && tipos["pedido.reembolsado"] == float64(1)
	})
	time.Sleep(500 * time.Millisecond) // past the test schedule's retries, had anything failed
	for _, st := range []string{"estoque.pedidos", "analise.pedidos"} {
		if n := p.stats.Queue(st).Failed.Load(); n != 0 {
			t.Errorf("%s: %d failures", st, n)
		}
	}
	for _, dead := range dlqs {
		if n := len(dead()); n != 0 {
			t.Errorf("%d dead letters", n)
		}
	}
}

// Three estoque instances on one queue, every event delivered twice: one
// reservation per pedido.
func TestThreeEstoqueConsumersReserveOncePerPedido(t *testing.T) {
	db, vhost := testenv.EmptyPostgres(t), testenv.RabbitMQ(t)
	environ := []string{"MOENDA_POSTGRES__URL=" + db.URL, "MOENDA_AMQP__URL=" + vhost.URL, "MOENDA_HANDLERS__ENABLED=estoque"}
	var instances []running
	for range 3 {
		instances = append(instances, start(t, "test", environ...))
	}
	ch := testenv.Channel(t, vhost.URL)
	const pedidos = 30
	for n := 1; n <= pedidos; n++ {
		id := uuid.NewString()
		dados := fmt.Sprintf(`{"pedidoId": %d, "itens": [{"produtoId": 7, "quantidade": 1}]}`, n)
		publishSeed001(t, ch, id, "pedido.criado", dados)
		publishSeed001(t, ch, id, "pedido.criado", dados) // redelivered
	}
	testenv.Eventually(t, 30*time.Second, "every delivery handled or dropped", func() bool {
		var seen int64
		for _, p := range instances {
			st := p.stats.Queue("estoque.pedidos")
			seen += st.Handled.Load() + st.Duplicates.Load()
		}
		return seen == 2*pedidos
	})
	var reservas, reservado int
	if err := db.Pool.QueryRow(context.Background(), `SELECT count(*), COALESCE(sum(quantidade), 0) FROM estoque_reserva_itens`).Scan(&reservas, &reservado); err != nil {
		t.Fatal(err)
	}
	if reservas != pedidos || reservado != pedidos {
		t.Fatalf("%d reservation items holding %d units for %d pedidos delivered twice, want %d and %d", reservas, reservado, pedidos, pedidos, pedidos)
	}
	for i, p := range instances {
		t.Logf("instance %d handled %d, dropped %d duplicates", i, p.stats.Queue("estoque.pedidos").Handled.Load(), p.stats.Queue("estoque.pedidos").Duplicates.Load())
	}
}

// A subscriber that is stopped while pedidos are created processes every
// one of them when it starts again: its durable queue kept them.
func TestAStoppedSubscriberProcessesEverythingOnRestart(t *testing.T) {
	db, vhost := testenv.EmptyPostgres(t), testenv.RabbitMQ(t)
	shared := []string{"MOENDA_POSTGRES__URL=" + db.URL, "MOENDA_AMQP__URL=" + vhost.URL}
	estoque := start(t, "test", append(shared, "MOENDA_HANDLERS__ENABLED=estoque")...) // declares estoque.pedidos
	estoque.stop()

	pedidos := start(t, "test", append(shared, "MOENDA_HANDLERS__ENABLED=pedidos")...)
	var ids []int
	for range 5 {
		code, body := call(t, "POST", pedidos.base+"/pedidos", `{"itens": [{"produto_id": 3, "quantidade": 2}], "total_centavos": 500}`)
		if code != http.StatusCreated {
			t.Fatalf("POST /pedidos = %d %v", code, body)
		}
		ids = append(ids, int(body["id"].(float64)))
	}
	testenv.Eventually(t, 20*time.Second, "the pedidos relayed", func() bool {
		out := testenv.Rabbitmqctl(t, "list_queues", "-p", vhost.Name, "name", "messages_ready")
		return containsLine(out, "estoque.pedidos\t10") // v1 and v2 of each creation
	})

	again := start(t, "test", append(shared, "MOENDA_HANDLERS__ENABLED=estoque")...)
	for _, id := range ids {
		testenv.Eventually(t, 20*time.Second, fmt.Sprintf("the reservation of pedido %d", id), func() bool {
			code, _ := call(t, "GET", fmt.Sprintf("%s/estoque/reservas/%d", again.base, id), "")
			return code == http.StatusOK
		})
	}
}

// containsLine reports whether out has line among its lines.
func containsLine(out, line string) bool {
	for _, l := range strings.Split(out, "\n") {
		if strings.TrimSpace(l) == line {
			return true
		}
	}
	return false
}
