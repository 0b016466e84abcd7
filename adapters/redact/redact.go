// Package redact hides secrets in values that end up in messages and logs.
package redact

import "net/url"

// URL hides the password of a connection URL (postgres://, amqp://, ...);
// anything that does not parse is returned as it is.
func URL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	return u.String()
}

// Path hides everything after the host of a URL whose path or query is the
// secret, as in a Slack webhook: https://hooks.slack.com/xxxxx.
func Path(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return raw
	}
	if u.Path == "" && u.RawQuery == "" {
		return URL(raw)
	}
	return URL((&url.URL{Scheme: u.Scheme, User: u.User, Host: u.Host}).String()) + "/xxxxx"
}
