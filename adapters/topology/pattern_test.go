package topology

import "testing"

func TestMatch(t *testing.T) {
	tests := []struct {
		pattern, key string
		want         bool
	}{
		{"tarefa.concluida", "tarefa.concluida", true},
		{"tarefa.concluida", "tarefa.criada", false},
		{"processo.*", "processo.submetido", true},
		{"processo.*", "processo.submetido.regular", false},
		{"processo.*", "processo", false},
		{"*.regular", "processo.regular", true},
		{"#", "anything.at.all", true},
		{"#", "x", true},
		{"canal.web.*", "canal.web.mensagem", true},
		{"pedido.#", "pedido", true},
		{"pedido.#", "pedido.criado.agora", true},
		{"#.falha", "tarefa.concluida.falha", true},
		{"#.falha", "tarefa.concluida", false},
	}
	for _, tt := range tests {
		if got := Match(tt.pattern, tt.key); got != tt.want {
			t.Errorf("Match(%q, %q) = %v, want %v", tt.pattern, tt.key, got, tt.want)
		}
	}
}

func TestOverlap(t *testing.T) {
	tests := []struct {
		a, b string
		want bool
	}{
		{"tarefa.#", "tarefa.concluida", true},
		{"tarefa.#", "processo.*", false},
		{"#", "processo.*", true},
		{"*.regular", "processo.*", true},
		{"*.regular", "processo.*.x", false},
		{"a.*.c", "a.b.#", true},
		{"a.*", "a.*.*", false},
		{"#.c", "a.#", true},
		{"#.c", "a.b", false},
		{"#", "#", true},
		{"a.#.b", "a.b", true},
		{"a.#.b", "a.c", false},
	}
	for _, tt := range tests {
		if got := Overlap(tt.a, tt.b); got != tt.want {
			t.Errorf("Overlap(%q, %q) = %v, want %v", tt.a, tt.b, got, tt.want)
		}
		if got := Overlap(tt.b, tt.a); got != tt.want {
			t.Errorf("Overlap(%q, %q) = %v, want %v (symmetry)", tt.b, tt.a, got, tt.want)
		}
	}
}

func TestValidatePattern(t *testing.T) {
	for _, ok := range []string{"a", "a.b", "a.*", "#", "*.regular", "a.#.b"} {
		if err := ValidatePattern(ok); err != nil {
			t.Errorf("ValidatePattern(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", "a..b", "a.b*", "a.#x", "."} {
		if err := ValidatePattern(bad); err == nil {
			t.Errorf("ValidatePattern(%q) accepted a bad pattern", bad)
		}
	}
}
