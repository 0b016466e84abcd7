package failures

import (
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"strings"
)

// placeholders replace, in order, what varies between failures of one
// cause: the values an error text quotes, addresses, ids and numbers. The
// order matters: a URL holds numbers, and a UUID holds hex runs. Each runs
// only on a text that may hold what it replaces (may, a condition every
// match meets), as every dead letter's error text is normalised on its
// way into the ledger and each pattern costs microseconds even where it
// finds nothing.
var placeholders = []struct {
	replace func(string) string
	may     func(string) bool
}{
	{pattern(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`+"`[^`]*`", `"…"`), anyOf(`"'` + "`")},
	{pattern(`[a-zA-Z][a-zA-Z0-9+.-]*://[^\s"']+`, "<url>"), contains("://")},
	{pattern(`[\w.+-]+@[\w-]+(?:\.[\w-]+)+`, "<email>"), contains("@")},
	{pattern(`(?i)\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b`, "<uuid>"), contains("-")},
	{pattern(`\b(?:\d{1,3}\.){3}\d{1,3}(?::\d+)?\b|\[[0-9a-fA-F:]+\](?::\d+)?`, "<addr>"), anyOf(".[")},
	{pattern(`\b[\w.-]+:\d{2,5}\b`, "<addr>"), colonDigit},
	{pattern(`[0-9]+\.[0-9]+`, "<n>"), contains(".")},
	{idWords, always},
	{digitRuns, anyOf("0123456789")},
}

// Normalise is an error text with what varies between failures of one
// cause (quoted values, URLs, e-mail addresses, UUIDs, network addresses,
// hex ids and numbers, also within words: 200ms, v2) replaced by placeholders, and its spaces folded.
func Normalise(text string) string {
	for _, p := range placeholders {
		if p.may(text) {
			text = p.replace(text)
		}
	}
	return strings.Join(strings.Fields(text), " ")
}

// pattern replaces every match of expr by with.
func pattern(expr, with string) func(string) string {
	re := regexp.MustCompile(expr)
	return func(text string) string { return re.ReplaceAllString(text, with) }
}

func contains(s string) func(string) bool {
	return func(text string) bool { return strings.Contains(text, s) }
}
func anyOf(chars string) func(string) bool {
	return func(text string) bool { return strings.ContainsAny(text, chars) }
}
func always(string) bool { return true }

// colonDigit says whether text holds a colon followed by a digit, as a
// host and its port do.
func colonDigit(text string) bool {
	for {
		i := strings.IndexByte(text, ':')
		if i < 0 || i+1 == len(text) {
			return false
		}
		if isDigit(text[i+1]) {
			return true
		}
		text = text[i+1:]
	}
}

// idWords replaces by <n> each word (a run of ASCII letters, digits and
// underscores, as a regular expression's \b bounds it) that is an id or a
// number: hex digits holding a digit, with or without 0x, or letters a to
// f only from 8 on (a shorter one is as likely a word: bad, face, added).
// An id that happens to hold no letter falls in the same group as one
// that holds some.
func idWords(text string) string { return replaceRuns(text, isWordByte, isID) }

// digitRuns replaces each run of digits by <n>.
func digitRuns(text string) string { return replaceRuns(text, isDigit, always) }

// replaceRuns replaces by <n> each longest run of bytes for which in
// holds, when replaced holds for the run.
func replaceRuns(text string, in func(byte) bool, replaced func(run string) bool) string {
	var b strings.Builder
	last := 0
	for i := 0; i < len(text); {
		if !in(text[i]) {
			i++
			continue
		}
		j := i + 1
		for j < len(text) && in(text[j]) {
			j++
		}
		if replaced(text[i:j]) {
			b.WriteString(text[last:i])
			b.WriteString("<n>")
			last = j
		}
		i = j
	}
	if last == 0 {
		return text
	}
	b.WriteString(text[last:])
	return b.String()
}

// isID says whether word is hex digits holding a digit, with or without
// 0x, or 8 or more of the letters a to f.
func isID(word string) bool {
	hex, digit := hexDigits(word)
	switch {
	case hex:
		return digit || len(word) >= 8
	case strings.HasPrefix(word, "0x"):
		hex, digit = hexDigits(word[2:])
		return hex && digit
	}
	return false
}

// hexDigits says whether s is all hex digits, and whether one of them is
// a decimal digit.
func hexDigits(s string) (hex, digit bool) {
	for i := range len(s) {
		c := s[i]
		switch {
		case isDigit(c):
			digit = true
		case (c < 'a' || c > 'f') && (c < 'A' || c > 'F'):
			return false, false
		}
	}
	return true, digit
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// isWordByte is \w of a regular expression: bytes of other characters
// than ASCII are never word bytes.
func isWordByte(c byte) bool {
	return isDigit(c) || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_'
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
