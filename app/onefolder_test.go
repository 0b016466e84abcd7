package app

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/moenda/moenda/adapters/testenv"
	"github.com/moenda/moenda/configs"
	"github.com/moenda/moenda/handlers/lembretes"
)

// A plugin that lives in its folder alone (handlers/lembretes: a
// table, a configuration section, its exchange, an HTTP route and a
// subscription) runs on RabbitMQ and in memory with the shipped configs/
// and migrations/ as they are: registering it and enabling it is all.
func TestAPluginIsOneFolder(t *testing.T) {
	reg := registryOf(t, append(Shipped(), lembretes.Plugin())...)
	environ := []string{"MOENDA_HANDLERS__ENABLED=lembretes", "MOENDA_HANDLERS__LEMBRETES__MARCA=lido"}
	brokers := map[string]func(t *testing.T) running{
		"memory": func(t *testing.T) running { return startWith(t, reg, configs.FS, "memory", environ...) },
		"rabbitmq": func(t *testing.T) running {
			p, _ := startAMQPWith(t, reg, environ...)
			return p
		},
	}
	for name, start := range brokers {
		t.Run(name, func(t *testing.T) {
			p := start(t)
			code, body := call(t, "POST", p.base+"/lembretes", `{"texto": "regar as plantas"}`)
			if code != http.StatusCreated {
				t.Fatalf("POST /lembretes = %d %v", code, body)
			}
			url := fmt.Sprintf("%s/lembretes/%d", p.base, int(body["id"].(float64)))
			testenv.Eventually(t, 10*time.Second, "the reminder seen by its consumer", func() bool {
				code, got := call(t, "GET", url, "")
				return code == http.StatusOK && got["visto"] == "lido"
			})
			if q := p.top.QueuesFor("lembretes.eventos", "lembrete.criado"); len(q) != 1 || q[0] != "lembretes.criados" {
				t.Fatalf("lembrete.criado reaches %v", q)
			}
		})
	}
}
