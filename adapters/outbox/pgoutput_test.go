package outbox

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/jackc/pglogrepl"
)

// outboxLayout is the outbox's layout as its relation message gives it.
func outboxLayout(t testing.TB) *columns {
	t.Helper()
	var c columns
	rel := &pglogrepl.RelationMessage{RelationID: 16390, Namespace: "public", RelationName: "watermill_outbox"}
	for _, name := range []string{"offset", "uuid", "created_at", "payload", "metadata", "transaction_id"} {
		rel.Columns = append(rel.Columns, &pglogrepl.RelationMessageColumn{Name: name})
	}
	if err := c.learn(rel); err != nil {
		t.Fatal(err)
	}
	return &c
}

// insertMessage is pgoutput's insert of vals into relation 16390.
func insertMessage(vals ...value) []byte {
	b := []byte{'I'}
	b = binary.BigEndian.AppendUint32(b, 16390)
	b = append(b, 'N')
	b = binary.BigEndian.AppendUint16(b, uint16(len(vals)))
	for _, v := range vals {
		b = append(b, v.kind)
		if v.kind == 't' || v.kind == 'b' {
			b = binary.BigEndian.AppendUint32(b, uint32(len(v.data)))
			b = append(b, v.data...)
		}
	}
	return b
}

func bin(n uint64) value { return value{'b', binary.BigEndian.AppendUint64(nil, n)} }

// inserts are the outbox's inserts as the relay receives them (binary),
// with text values, and with NULL payload and metadata.
var inserts = [][]byte{
	insertMessage(bin(42), value{'b', []byte("0f6e1b9c-6a43-4c59-9a3e-6f1d2f9b8a10")}, bin(7), value{'b', bytes.Repeat([]byte("x"), 900)},
		value{'b', []byte(`{"event_name":"pedido.criado.v1","correlation_id":"c-1"}`)}, bin(1234)),
	insertMessage(value{'t', []byte("43")}, value{'t', []byte("u-2")}, value{'t', []byte("2026-12-04 12:00:00")}, value{'t', []byte(`\x7b7d`)},
		value{'t', []byte(`{}`)}, value{'t', []byte("1235")}),
	insertMessage(bin(44), value{'b', []byte("u-3")}, bin(7), value{kind: 'n'}, value{kind: 'n'}, bin(1236)),
}

// fromTuple reads an insert pglogrepl decoded, as the relay read them
// before it read the messages itself: insert's reference.
func fromTuple(c *columns, t *pglogrepl.TupleData) (outboxRow, error) {
	vals := make([]value, len(t.Columns))
	for i, col := range t.Columns {
		vals[i] = value{col.DataType, col.Data}
	}
	var rw outboxRow
	txID, err := vals[c.txID].integer()
	if err != nil {
		return rw, err
	}
	rw.txID = uint64(txID)
	if rw.offset, err = vals[c.offset].integer(); err != nil {
		return rw, err
	}
	rw.uuid = string(vals[c.uuid].data)
	rw.payload, err = vals[c.payload].bytea()
	rw.metadata = vals[c.metadata].data
	return rw, err
}

// insert must read every insert as pglogrepl's decoding does, refuse a
// message cut short (where pglogrepl panics), and keep nothing of the
// buffer the message lies in.
func FuzzInsert(f *testing.F) {
	c := outboxLayout(f)
	for _, msg := range inserts {
		f.Add(msg)
		f.Add(msg[:len(msg)-1])
	}
	f.Fuzz(func(t *testing.T, msg []byte) {
		got, err := c.insert(msg)
		if err != nil {
			return
		}
		m, perr := pglogrepl.Parse(msg)
		ins, ok := m.(*pglogrepl.InsertMessage)
		if perr != nil || !ok {
			t.Fatalf("%q: read %+v, pglogrepl says %T, %v", msg, got, m, perr)
		}
		want, werr := fromTuple(c, ins.Tuple)
		if werr != nil || got.position != want.position || got.uuid != want.uuid || !bytes.Equal(got.payload, want.payload) ||
			!bytes.Equal(got.metadata, want.metadata) || (got.payload == nil) != (want.payload == nil) || (got.metadata == nil) != (want.metadata == nil) {
			t.Fatalf("%q: read %+v, pglogrepl's decoding gives %+v (%v)", msg, got, want, werr)
		}
		clear(msg)
		if !bytes.Equal(got.payload, want.payload) || !bytes.Equal(got.metadata, want.metadata) {
			t.Fatalf("%q: the row changed with the buffer it was read from", msg)
		}
	})
}

func TestInsertReadsTheOutboxRows(t *testing.T) {
	c := outboxLayout(t)
	for i, want := range []outboxRow{
		{position: position{txID: 1234, offset: 42}, uuid: "0f6e1b9c-6a43-4c59-9a3e-6f1d2f9b8a10", payload: bytes.Repeat([]byte("x"), 900),
			metadata: []byte(`{"event_name":"pedido.criado.v1","correlation_id":"c-1"}`)},
		{position: position{txID: 1235, offset: 43}, uuid: "u-2", payload: []byte("{}"), metadata: []byte("{}")},
		{position: position{txID: 1236, offset: 44}, uuid: "u-3"},
	} {
		got, err := c.insert(inserts[i])
		if err != nil || got.position != want.position || got.uuid != want.uuid || !bytes.Equal(got.payload, want.payload) || !bytes.Equal(got.metadata, want.metadata) {
			t.Errorf("insert %d = %+v, %v; want %+v", i, got, err, want)
		}
	}
	for n := range len(inserts[0]) - 1 {
		if _, err := c.insert(inserts[0][:n]); err == nil {
			t.Errorf("an insert cut to %d bytes was read", n)
		}
	}
	if _, err := c.insert(insertMessage(bin(1), bin(2))); err == nil {
		t.Error("an insert of 2 columns into the outbox's 6 was read")
	}
}

// BenchmarkInsert is the decoding of a relayed row: reading the message
// in place against pglogrepl's decoding.
func BenchmarkInsert(b *testing.B) {
	c := outboxLayout(b)
	b.Run("in place", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := c.insert(inserts[0]); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("pglogrepl", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			m, err := pglogrepl.Parse(inserts[0])
			if err != nil {
				b.Fatal(err)
			}
			if _, err := fromTuple(c, m.(*pglogrepl.InsertMessage).Tuple); err != nil {
				b.Fatal(err)
			}
		}
	})
}
