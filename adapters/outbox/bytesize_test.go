package outbox

import "testing"

func TestByteSize(t *testing.T) {
	for in, want := range map[string]ByteSize{"1GB": 1 << 30, "512MB": 512 << 20, " 64 kB ": 64 << 10, "1048576": 1 << 20, "0": 0, "2TB": 2 << 40} {
		var b ByteSize
		if err := b.UnmarshalText([]byte(in)); err != nil || b != want {
			t.Errorf("%q = %d, %v; want %d", in, b, err, want)
		}
	}
	for _, in := range []string{"", "1.5GB", "GB", "1 GiB", "-", "99999999999TB"} {
		var b ByteSize
		if err := b.UnmarshalText([]byte(in)); err == nil {
			t.Errorf("%q = %d, want an error", in, b)
		}
	}
	for b, want := range map[ByteSize]string{0: "0B", 1 << 30: "1GB", 1536 << 20: "1.5GB", 100: "100B", 123456: "120.6kB"} {
		if got := b.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", int64(b), got, want)
		}
	}
}
