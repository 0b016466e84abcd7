package failures

import (
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"strings"
)

// placeholders replace, in order, what varies between failures of one
// cause: the values an error text quotes, addresses, ids and numbers. The
// order matters: a URL holds numbers, and a UUID holds hex runs. A
// pattern that cannot match a text without one of the characters in
// needs is not run on a text that has none: each of every dead letter's
// error text cost as much as the rest of reading it.
var placeholders = []struct {
	re    *regexp.Regexp
	with  string
	needs string // "": run always
}{
	{regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`"), `"…"`, `"'` + "`"},
	{regexp.MustCompile(`[a-zA-Z][a-zA-Z0-9+.-]*://[^\s"']+`), "<url>", ":"},
	{regexp.MustCompile(`[\w.+-]+@[\w-]+(?:\.[\w-]+)+`), "<email>", "@"},
	{regexp.MustCompile(`(?i)\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b`), "<uuid>", "-"},
	{regexp.MustCompile(`\b(?:\d{1,3}\.){3}\d{1,3}(?::\d+)?\b|\[[0-9a-fA-F:]+\](?::\d+)?`), "<addr>", ".["},
	{regexp.MustCompile(`\b[\w.-]+:\d{2,5}\b`), "<addr>", ":"},
	{regexp.MustCompile(`[0-9]+\.[0-9]+`), "<n>", "."},
	// A token of hex digits that holds a digit is an id or a number, so
	// that an id that happens to hold no letter falls in the same group;
	// one of letters only is an id from 8 letters on (a shorter one is as
	// likely a word: bad, face, added).
	{regexp.MustCompile(`\b(?:0x)?[0-9a-fA-F]*[0-9][0-9a-fA-F]*\b|\b[a-fA-F]{8,}\b`), "<n>", ""},
	{regexp.MustCompile(`[0-9]+`), "<n>", "0123456789"},
}

// Normalise is an error text with what varies between failures of one
// cause (quoted values, URLs, e-mail addresses, UUIDs, network addresses,
// hex ids and numbers, also within words: 200ms, v2) replaced by placeholders, and its spaces folded.
func Normalise(text string) string {
	for _, p := range placeholders {
		if p.needs == "" || strings.ContainsAny(text, p.needs) {
			text = p.re.ReplaceAllString(text, p.with)
		}
	}
	return strings.Join(strings.Fields(text), " ")
}

// Fingerprint names the group of failures that share a cause: the same
// handler, reason class and normalised error text. It is short, stable
// across versions of moenda that keep Normalise, and safe in a URL.
func Fingerprint(handler, reason, errText string) string {
	sum := sha256.Sum256([]byte(handler + "\x00" + reason + "\x00" + Normalise(errText)))
	return hex.EncodeToString(sum[:8])
}

// IsFingerprint says whether s has the shape Fingerprint gives: 16
// lower-case hex digits.
func IsFingerprint(s string) bool {
	if len(s) != 16 {
		return false
	}
	for _, c := range []byte(s) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
