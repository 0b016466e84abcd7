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
