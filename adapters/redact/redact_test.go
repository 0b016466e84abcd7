package redact

import "testing"

func TestURL(t *testing.T) {
	for in, want := range map[string]string{
		"amqp://guest:guest@127.0.0.1:5672/":      "amqp://guest:xxxxx@127.0.0.1:5672/",
		"postgres://moenda:s3cret@db:5432/moenda": "postgres://moenda:xxxxx@db:5432/moenda",
		"postgres://postgres@127.0.0.1:5432/x":    "postgres://postgres@127.0.0.1:5432/x",
		"not a url %zz":                           "not a url %zz",
	} {
		if got := URL(in); got != want {
			t.Errorf("URL(%q) = %q, want %q", in, got, want)
		}
	}
	for in, want := range map[string]string{
		"https://hooks.slack.com/services/T0/B0/secret": "https://hooks.slack.com/xxxxx",
		"https://example.test/hook?token=secret":        "https://example.test/xxxxx",
		"https://example.test":                          "https://example.test",
		"":                                              "",
	} {
		if got := Path(in); got != want {
			t.Errorf("Path(%q) = %q, want %q", in, got, want)
		}
	}
}
