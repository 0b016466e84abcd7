// Package redact hides secrets in values that end up in messages and logs.
package redact

import (
	"net/url"
	"regexp"
	"strconv"
	"strings"
)

// hidden stands for a secret.
const hidden = "xxxxx"

// URL hides the password of a connection string: a URL (postgres://,
// amqp://, ...) or a keyword DSN (host=db password=secret). A URL that
// does not parse (a password with an unescaped #, / or %) still has
// everything between the scheme's "user:" and the last @ hidden, since
// that is where a password would be.
func URL(raw string) string {
	if keywordDSN.MatchString(raw) {
		return dsnPassword.ReplaceAllString(raw, "${1}"+hidden)
	}
	u, err := url.Parse(raw)
	if err == nil && u.User == nil && !strings.Contains(raw, "@") {
		return raw
	}
	if err == nil && u.User != nil && u.Fragment == "" && !strings.Contains(u.Host, "@") {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), hidden)
		}
		return u.String()
	}
	return userinfo(raw)
}

// userinfo hides what follows the user name in the authority of raw,
// read as text: from the first : after "://" up to the last @.
func userinfo(raw string) string {
	scheme := strings.Index(raw, "://")
	if scheme < 0 {
		return raw
	}
	start := scheme + len("://")
	at := strings.LastIndex(raw, "@")
	if at < start {
		return raw
	}
	colon := strings.Index(raw[start:at], ":")
	if colon < 0 {
		return raw
	}
	return raw[:start+colon+1] + hidden + raw[at:]
}

var (
	// keywordDSN is a libpq keyword/value connection string.
	keywordDSN = regexp.MustCompile(`^\s*[a-z_]+\s*=`)
	// dsnPassword is its password, bare or quoted with \' and \\ escapes.
	dsnPassword = regexp.MustCompile(`(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|\S*)`)
)

// Path hides everything after the host of a URL whose path or query is the
// secret, as in a Slack webhook: https://hooks.slack.com/xxxxx.
func Path(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return userinfo(hostOnly(raw))
	}
	if u.Host == "" {
		return raw
	}
	if u.Path == "" && u.RawQuery == "" {
		return URL(raw)
	}
	return URL((&url.URL{Scheme: u.Scheme, User: u.User, Host: u.Host}).String()) + "/" + hidden
}

// hostOnly cuts raw after its authority, for a URL that does not parse.
func hostOnly(raw string) string {
	scheme := strings.Index(raw, "://")
	if scheme < 0 {
		return hidden
	}
	rest := raw[scheme+len("://"):]
	if i := strings.IndexAny(rest, "/?#"); i >= 0 && i > strings.LastIndex(rest, "@") {
		return raw[:scheme+len("://")+i] + "/" + hidden
	}
	return raw
}

// Error is err with the password of the connection string raw hidden
// wherever its message quotes it: the parsers' errors (url.Error, pgx's)
// repeat the string they could not parse. It unwraps to err.
func Error(err error, raw string) error {
	secret := password(raw)
	if err == nil || secret == "" {
		return err
	}
	forms := []string{secret}
	if len(secret) >= 2 && secret[0] == '\'' && secret[len(secret)-1] == '\'' { // a keyword DSN's quoted value
		forms = append(forms, strings.NewReplacer(`\'`, "'", `\\`, `\`).Replace(secret[1:len(secret)-1]))
	}
	msg := err.Error()
	for _, f := range forms {
		quoted := strconv.Quote(f)
		for _, shown := range []string{quoted[1 : len(quoted)-1], f, url.QueryEscape(f)} {
			msg = strings.ReplaceAll(msg, shown, hidden)
		}
	}
	return &redacted{msg: msg, err: err}
}

type redacted struct {
	msg string
	err error
}

func (e *redacted) Error() string { return e.msg }
func (e *redacted) Unwrap() error { return e.err }

// password is the password in raw as written there, which URL hides; ""
// when none.
func password(raw string) string {
	shown := URL(raw)
	if shown == raw {
		return ""
	}
	// What URL cut out lies between the common prefix and suffix, which
	// end where the mark begins and ends (a password may begin or end
	// with an x).
	k := strings.Index(shown, hidden)
	i := 0
	for i < k && raw[i] == shown[i] {
		i++
	}
	j, tail := 0, len(shown)-k-len(hidden)
	for j < tail && j < len(raw)-i && raw[len(raw)-1-j] == shown[len(shown)-1-j] {
		j++
	}
	return raw[i : len(raw)-j]
}
