package failures

import (
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
)

// byPatterns is Normalise as regular expressions alone, every one run on
// every text: what Normalise must give, whatever it skips or scans by
// hand. A fingerprint is kept across versions, so the two may never part.
func byPatterns(text string) string {
	for _, p := range everyPattern {
		text = p.re.ReplaceAllString(text, p.with)
	}
	return strings.Join(strings.Fields(text), " ")
}

var everyPattern = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`"), `"…"`},
	{regexp.MustCompile(`[a-zA-Z][a-zA-Z0-9+.-]*://[^\s"']+`), "<url>"},
	{regexp.MustCompile(`[\w.+-]+@[\w-]+(?:\.[\w-]+)+`), "<email>"},
	{regexp.MustCompile(`(?i)\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b`), "<uuid>"},
	{regexp.MustCompile(`\b(?:\d{1,3}\.){3}\d{1,3}(?::\d+)?\b|\[[0-9a-fA-F:]+\](?::\d+)?`), "<addr>"},
	{regexp.MustCompile(`\b[\w.-]+:\d{2,5}\b`), "<addr>"},
	{regexp.MustCompile(`[0-9]+\.[0-9]+`), "<n>"},
	{regexp.MustCompile(`\b(?:0x)?[0-9a-fA-F]*[0-9][0-9a-fA-F]*\b|\b[a-fA-F]{8,}\b`), "<n>"},
	{regexp.MustCompile(`[0-9]+`), "<n>"},
}

var normaliseSeeds = []string{
	"reserve pedido 1042: dial tcp 10.0.3.42:5432: connect: connection refused",
	`insert tarefa 42: duplicate key "tarefas_pkey"`, "dial tcp [::1]:5432: refused", "lookup db.internal:5432 failed",
	"GET https://api.example.com/v1/x?id=9 answered 503", "no user ana.souza+1@example.com.br",
	"processo 550e8400-e29b-41d4-a716-446655440000 missing", "object 5f3c9a1b2e not found; 0xdeadbeef1 0xdeadbeef 0x 0x1g 0X1f",
	"took 1.5s, then 200ms", "version v2 unknown", "a face is not a hex id, deadbeefcafe is, deadbee not; DEADBEEF _ab12_ é12 12é",
	"ação 7\xff8 9", ":", "a:", "host:1", "host:12", "", " ", "0", "x_1 1_x",
}

func FuzzNormalise(f *testing.F) {
	for _, seed := range normaliseSeeds {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, text string) {
		if got, want := Normalise(text), byPatterns(text); got != want {
			t.Fatalf("Normalise(%q) = %q; its patterns give %q", text, got, want)
		}
	})
}

// Texts made of the pieces the patterns turn on, many more than the
// fuzzer's seeds, checked on every run.
func TestNormaliseAgreesWithItsPatterns(t *testing.T) {
	pieces := []string{"0", "7", "42", "0x", "x", "a", "F", "ab", "deadbeef", "DEAD", "face", "g", "_", "-", ".", ":", "@", "/",
		"://", " ", "\t", `"`, "'", "`", "\\", "[", "]", "é", "\xff", "v", "http", "com", "550e8400-e29b-41d4-a716-446655440000"}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		var b strings.Builder
		for range 1 + rng.IntN(12) {
			b.WriteString(pieces[rng.IntN(len(pieces))])
		}
		text := b.String()
		if got, want := Normalise(text), byPatterns(text); got != want {
			t.Fatalf("Normalise(%q) = %q; its patterns give %q", text, got, want)
		}
	}
}

func BenchmarkNormalise(b *testing.B) {
	text := normaliseSeeds[0]
	b.Run("skipping and scanning", func(b *testing.B) {
		for b.Loop() {
			Normalise(text)
		}
	})
	b.Run("every pattern", func(b *testing.B) {
		for b.Loop() {
			byPatterns(text)
		}
	})
}
