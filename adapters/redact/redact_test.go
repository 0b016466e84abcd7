package redact

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// expect checks that fn, named name, turns each input into its wanted
// output.
func expect(t *testing.T, name string, fn func(string) string, cases map[string]string) {
	t.Helper()
	for in, want := range cases {
		if got := fn(in); got != want {
			t.Errorf("%s(%q) = %q, want %q", name, in, got, want)
		}
	}
}

func TestURL(t *testing.T) {
	expect(t, "URL", URL, map[string]string{
		"amqp://guest:guest@127.0.0.1:5672/":      "amqp://guest:xxxxx@127.0.0.1:5672/",
		"postgres://moenda:s3cret@db:5432/moenda": "postgres://moenda:xxxxx@db:5432/moenda",
		"postgres://postgres@127.0.0.1:5432/x":    "postgres://postgres@127.0.0.1:5432/x",
		"not a url %zz":                           "not a url %zz",
		// Passwords written without escaping what a URL reserves.
		"postgres://moenda:se#cret@db:5432/moenda":  "postgres://moenda:xxxxx@db:5432/moenda",
		"postgres://moenda:se/cret@db:5432/moenda":  "postgres://moenda:xxxxx@db:5432/moenda",
		"amqp://moenda:50%off@rabbit:5672/":         "amqp://moenda:xxxxx@rabbit:5672/",
		"amqp://moenda:p@ss:word@rabbit:5672/":      "amqp://moenda:xxxxx@rabbit:5672/",
		"postgres://moenda:s3cret@db:5432/x?a=%zz":  "postgres://moenda:xxxxx@db:5432/x?a=%zz",
		"host=db user=moenda password=s3cret":       "host=db user=moenda password=xxxxx",
		"host=db password='s3 cr\\'et' dbname=x":    "host=db password=xxxxx dbname=x",
		"host=db user=moenda password = s3cret":     "host=db user=moenda password = xxxxx",
		"host=db user=moenda":                       "host=db user=moenda",
		"https://example.test/path@with-at-sign/x":  "https://example.test/path@with-at-sign/x",
		"postgres://moenda@db:5432/moenda?sslmode=": "postgres://moenda@db:5432/moenda?sslmode=",
	})
	expect(t, "Path", Path, map[string]string{
		"https://hooks.slack.com/services/T0/B0/secret": "https://hooks.slack.com/xxxxx",
		"https://example.test/hook?token=secret":        "https://example.test/xxxxx",
		"https://example.test":                          "https://example.test",
		"":                                              "",
		"https://example.test/hook?token=%zz-secret": "https://example.test/xxxxx",
		"https://u:pa%ss@example.test/hook/secret":   "https://u:xxxxx@example.test/xxxxx",
	})
}

// No secret survives, whatever the value around it looks like.
func FuzzURLHidesThePassword(f *testing.F) {
	for _, s := range []string{"s3cret", "se#cret", "se/cret", "50%off", "p@ss", "a'b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, secret string) {
		if len(secret) < 4 || strings.ContainsAny(secret, "@\\'") || strings.ContainsFunc(secret, unicode.IsSpace) || strings.Contains("postgres://moenda:@db:5432/moenda", secret) {
			return
		}
		for _, raw := range []string{"postgres://moenda:" + secret + "@db:5432/moenda", "host=db password=" + secret + " dbname=x"} {
			if got := URL(raw); strings.Contains(got, secret) {
				t.Fatalf("URL(%q) = %q keeps the password", raw, got)
			}
		}
	})
}

// The parsers' errors repeat the string they could not parse: Error hides
// the password there too, however the message quotes it.
func TestError(t *testing.T) {
	for _, raw := range []string{
		"postgres://moenda:x50%zzx@db:5432/moenda", "amqp://moenda:se\"cret@rabbit:5672/", "host=db password='s3 cr\\'et' dbname=x",
	} {
		secret := password(raw)
		if secret == "" {
			t.Fatalf("no password found in %q", raw)
		}
		_, perr := url.Parse(raw)
		for _, err := range []error{perr, fmt.Errorf("cannot parse %q: %s", raw, raw), fmt.Errorf("%s", url.QueryEscape(raw))} {
			if err == nil {
				continue
			}
			got := Error(err, raw)
			if strings.Contains(got.Error(), secret) || strings.Contains(got.Error(), strconv.Quote(secret)[1:len(strconv.Quote(secret))-1]) {
				t.Errorf("Error(%q) = %q keeps %q", err, got, secret)
			}
			if !errors.Is(got, err) {
				t.Errorf("Error(%q) does not unwrap to it", err)
			}
		}
	}
	if err := Error(errors.New("refused"), "postgres://moenda@db/x"); err.Error() != "refused" {
		t.Errorf("without a password: %v", err)
	}
}
