package topology

import (
	"fmt"
	"strings"
)

// Match reports whether routing key matches the AMQP topic pattern: "*"
// stands for exactly one word, "#" for zero or more.
func Match(pattern, key string) bool {
	return matchWords(strings.Split(pattern, "."), strings.Split(key, "."))
}

func matchWords(p, k []string) bool {
	for len(p) > 0 {
		switch p[0] {
		case "#":
			for i := 0; i <= len(k); i++ {
				if matchWords(p[1:], k[i:]) {
					return true
				}
			}
			return false
		case "*":
			if len(k) == 0 {
				return false
			}
		default:
			if len(k) == 0 || k[0] != p[0] {
				return false
			}
		}
		p, k = p[1:], k[1:]
	}
	return len(k) == 0
}

// Overlap reports whether some routing key matches both patterns. It decides
// which exchanges a subscription is bound on: those whose events it can see.
func Overlap(a, b string) bool {
	return overlapWords(strings.Split(a, "."), strings.Split(b, "."))
}

func overlapWords(a, b []string) bool {
	switch {
	case len(a) == 0 && len(b) == 0:
		return true
	case len(a) > 0 && a[0] == "#":
		// "#" takes no word, or takes b's first word and stays.
		return overlapWords(a[1:], b) || len(b) > 0 && overlapWords(a, b[1:])
	case len(b) > 0 && b[0] == "#":
		return overlapWords(b, a)
	case len(a) == 0 || len(b) == 0:
		return false
	case a[0] == "*" || b[0] == "*" || a[0] == b[0]:
		return overlapWords(a[1:], b[1:])
	default:
		return false
	}
}

// ValidatePattern checks a binding pattern: dot-separated non-empty words,
// each a literal, "*" or "#".
func ValidatePattern(p string) error {
	if p == "" {
		return fmt.Errorf("routing-key pattern is empty")
	}
	for _, w := range strings.Split(p, ".") {
		if w == "" {
			return fmt.Errorf("routing-key pattern %q has an empty word", p)
		}
		if w != "*" && w != "#" && strings.ContainsAny(w, "*#") {
			return fmt.Errorf("routing-key pattern %q: %q mixes a wildcard with letters; use a whole word * or #", p, w)
		}
	}
	return nil
}
