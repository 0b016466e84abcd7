package outbox

import (
	"fmt"
	"strconv"
	"strings"
)

// ByteSize is a size in bytes that YAML may write as a number of bytes or
// with PostgreSQL's units (kB, MB, GB, TB, each 1024 times the one
// before), as max_slot_wal_keep_size is written.
type ByteSize int64

var byteUnits = []struct {
	suffix string
	size   int64
}{{"TB", 1 << 40}, {"GB", 1 << 30}, {"MB", 1 << 20}, {"kB", 1 << 10}, {"B", 1}}

// UnmarshalText reads "1GB", "512MB" or "1048576".
func (b *ByteSize) UnmarshalText(text []byte) error {
	s := strings.TrimSpace(string(text))
	unit := int64(1)
	for _, u := range byteUnits {
		if strings.HasSuffix(s, u.suffix) {
			s, unit = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.size
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n > (1<<62)/unit {
		return fmt.Errorf("%q is not a size: write a whole number of bytes, or one with kB, MB, GB or TB", text)
	}
	*b = ByteSize(n * unit)
	return nil
}

// String writes the size in the largest unit it reaches: exactly when
// that unit divides it, else to one decimal.
func (b ByteSize) String() string {
	for _, u := range byteUnits {
		if int64(b) >= u.size || u.size == 1 {
			if int64(b)%u.size == 0 {
				return strconv.FormatInt(int64(b)/u.size, 10) + u.suffix
			}
			return strconv.FormatFloat(float64(b)/float64(u.size), 'f', 1, 64) + u.suffix
		}
	}
	return "0B"
}
