package outbox

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pglogrepl"
)

// columns is where the outbox's columns sit in the stream's tuples, as
// its relation message describes them (it comes before the first insert,
// and again after the table changes).
type columns struct {
	relation                                        uint32
	known                                           bool
	txID, offset, uuid, payload, metadata, ncolumns int
}

// learn takes the layout of the outbox from m.
func (c *columns) learn(m *pglogrepl.RelationMessage) error {
	at := map[string]int{}
	for i, col := range m.Columns {
		at[col.Name] = i
	}
	idx := func(name string) (int, error) {
		i, ok := at[name]
		if !ok {
			return 0, fmt.Errorf("replication stream: table %s.%s has no column %s: is it watermill_outbox?", m.Namespace, m.RelationName, name)
		}
		return i, nil
	}
	var errs []error
	get := func(dst *int, name string) {
		i, err := idx(name)
		*dst = i
		errs = append(errs, err)
	}
	get(&c.txID, "transaction_id")
	get(&c.offset, "offset")
	get(&c.uuid, "uuid")
	get(&c.payload, "payload")
	get(&c.metadata, "metadata")
	if err := errors.Join(errs...); err != nil {
		return err
	}
	c.relation, c.ncolumns, c.known = m.RelationID, len(m.Columns), true
	return nil
}

// value is a column's value in an inserted tuple: its kind ('n' null,
// 'u' an unchanged TOAST value, 't' text, 'b' binary) and its bytes.
type value struct {
	kind byte
	data []byte
}

// errMalformed is an insert message cut short or of an unknown kind.
var errMalformed = errors.New("replication stream: a malformed insert message")

// insert decodes an insert of the outbox from its pgoutput message, whole
// (from its 'I'). It reads the message in place rather than through
// pglogrepl.Parse, which allocates a value and a copy of each column of
// each row (8 % of a draining relay's CPU). The values the relay keeps
// are copied out, in one allocation: the next receive reuses the buffer
// msg lies in.
func (c *columns) insert(msg []byte) (outboxRow, error) {
	var rw outboxRow
	if !c.known {
		return rw, errors.New("replication stream: an insert came before the outbox's layout")
	}
	// 'I', the relation's oid, 'N' (a new tuple), its number of columns
	if len(msg) < 8 || msg[0] != byte(pglogrepl.MessageTypeInsert) || msg[5] != 'N' {
		return rw, errMalformed
	}
	if n := int(binary.BigEndian.Uint16(msg[6:8])); n != c.ncolumns {
		return rw, fmt.Errorf("replication stream: an insert of %d columns into an outbox of %d", n, c.ncolumns)
	}
	var inline [8]value
	vals := inline[:0]
	if c.ncolumns > len(inline) {
		vals = make([]value, 0, c.ncolumns)
	}
	for p := msg[8:]; len(vals) < c.ncolumns; {
		if len(p) == 0 {
			return rw, errMalformed
		}
		v := value{kind: p[0]}
		p = p[1:]
		switch v.kind {
		case pglogrepl.TupleDataTypeText, pglogrepl.TupleDataTypeBinary:
			if len(p) < 4 {
				return rw, errMalformed
			}
			n := binary.BigEndian.Uint32(p)
			if uint64(n) > uint64(len(p)-4) {
				return rw, errMalformed
			}
			v.data, p = p[4:4+n], p[4+n:]
		case pglogrepl.TupleDataTypeNull, pglogrepl.TupleDataTypeToast:
		default:
			return rw, errMalformed
		}
		vals = append(vals, v)
	}
	txID, err := vals[c.txID].integer()
	if err != nil {
		return rw, fmt.Errorf("replication stream: transaction_id: %w", err)
	}
	rw.txID = uint64(txID)
	if rw.offset, err = vals[c.offset].integer(); err != nil {
		return rw, fmt.Errorf("replication stream: offset: %w", err)
	}
	rw.uuid = string(vals[c.uuid].data)
	payload, err := vals[c.payload].bytea()
	if err != nil {
		return rw, fmt.Errorf("replication stream: payload: %w", err)
	}
	metadata := vals[c.metadata].data
	kept := make([]byte, len(payload)+len(metadata))
	n := copy(kept, payload)
	copy(kept[n:], metadata)
	if payload != nil {
		rw.payload = kept[:n:n]
	}
	if metadata != nil {
		rw.metadata = kept[n:]
	}
	return rw, nil
}

// integer reads a bigint or xid8 column.
func (v value) integer() (int64, error) {
	switch v.kind {
	case pglogrepl.TupleDataTypeBinary:
		if len(v.data) != 8 {
			return 0, fmt.Errorf("%d bytes, not 8", len(v.data))
		}
		return int64(binary.BigEndian.Uint64(v.data)), nil
	case pglogrepl.TupleDataTypeText:
		n, err := strconv.ParseUint(string(v.data), 10, 64)
		return int64(n), err
	}
	return 0, fmt.Errorf("no value (%c)", v.kind)
}

// bytea reads the payload column; NULL is an empty payload.
func (v value) bytea() ([]byte, error) {
	switch v.kind {
	case pglogrepl.TupleDataTypeBinary:
		return v.data, nil
	case pglogrepl.TupleDataTypeText: // \x followed by hex
		if len(v.data) < 2 || string(v.data[:2]) != `\x` {
			return nil, errors.New("not hex")
		}
		out := make([]byte, (len(v.data)-2)/2)
		_, err := fmt.Sscanf(string(v.data[2:]), "%x", &out)
		return out, err
	}
	return nil, nil
}
