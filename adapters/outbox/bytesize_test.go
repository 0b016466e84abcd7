package outbox

import (
	"strings"
	"testing"
)

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

func TestConfigChecksTheReader(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Reader, cfg.SlotWarnSize = "stream", -1
	err := cfg.Validate()
	for _, want := range []string{`outbox.reader must be auto, logical or poll, got "stream"`, "outbox.slot_warn_size must not be negative, got -1"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want it to say %q", err, want)
		}
	}
	for _, reader := range []string{ReaderAuto, ReaderLogical, ReaderPoll} {
		cfg := DefaultConfig()
		cfg.Reader = reader
		if err := cfg.Validate(); err != nil {
			t.Errorf("reader %s: %v", reader, err)
		}
	}
}
