package amqp

import (
	"strings"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

func TestFitsRefusesWhatAMQPCannotCarry(t *testing.T) {
	ok := amqp091.Publishing{ContentType: "application/json", MessageId: "m", Type: "tarefa.concluida.v1",
		Headers: amqp091.Table{"aggregate_id": strings.Repeat("a", 100_000)}}
	if err := fits(ok, 131072); err != nil {
		t.Fatalf("a 100 KB header in a 128 KiB frame: %v", err)
	}
	for name, tc := range map[string]struct {
		pub  amqp091.Publishing
		want string
	}{
		"header over the frame": {amqp091.Publishing{Headers: amqp091.Table{"aggregate_id": strings.Repeat("a", 131072)}}, "header aggregate_id"},
		"long correlation id":   {amqp091.Publishing{CorrelationId: strings.Repeat("c", 256)}, "correlation id is 256 bytes"},
		"long header name":      {amqp091.Publishing{Headers: amqp091.Table{strings.Repeat("k", 300): "v"}}, "name of a header is 300 bytes"},
		"many headers together": {amqp091.Publishing{Headers: manyHeaders(20, 7000)}, "frame_max"},
	} {
		err := fits(tc.pub, 131072)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: fits = %v, want an error saying %q", name, err, tc.want)
		}
	}
}

func manyHeaders(n, size int) amqp091.Table {
	h := amqp091.Table{}
	for i := range n {
		h[strings.Repeat("h", i+1)] = strings.Repeat("v", size)
	}
	return h
}
