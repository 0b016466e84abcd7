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

// row decodes an inserted tuple of the outbox. Values come in binary
// (pluginArgs): xid8 and bigint as 8 big-endian bytes, the rest as their
// bytes; text, should a server send it, is read too.
func (c *columns) row(t *pglogrepl.TupleData) (outboxRow, error) {
	var rw outboxRow
	if !c.known || t == nil || len(t.Columns) != c.ncolumns {
		return rw, errors.New("replication stream: an insert came before the outbox's layout")
	}
	txID, err := integer(t.Columns[c.txID])
	if err != nil {
		return rw, fmt.Errorf("replication stream: transaction_id: %w", err)
	}
	rw.txID = uint64(txID)
	if rw.offset, err = integer(t.Columns[c.offset]); err != nil {
		return rw, fmt.Errorf("replication stream: offset: %w", err)
	}
	rw.uuid = string(t.Columns[c.uuid].Data)
	if rw.payload, err = bytea(t.Columns[c.payload]); err != nil {
		return rw, fmt.Errorf("replication stream: payload: %w", err)
	}
	rw.metadata = t.Columns[c.metadata].Data
	return rw, nil
}

// integer reads a bigint or xid8 column.
func integer(col *pglogrepl.TupleDataColumn) (int64, error) {
	switch col.DataType {
	case pglogrepl.TupleDataTypeBinary:
		if len(col.Data) != 8 {
			return 0, fmt.Errorf("%d bytes, not 8", len(col.Data))
		}
		return int64(binary.BigEndian.Uint64(col.Data)), nil
	case pglogrepl.TupleDataTypeText:
		n, err := strconv.ParseUint(string(col.Data), 10, 64)
		return int64(n), err
	}
	return 0, fmt.Errorf("no value (%c)", col.DataType)
}

// bytea reads the payload column; NULL is an empty payload.
func bytea(col *pglogrepl.TupleDataColumn) ([]byte, error) {
	switch col.DataType {
	case pglogrepl.TupleDataTypeBinary:
		return col.Data, nil
	case pglogrepl.TupleDataTypeText: // \x followed by hex
		if len(col.Data) < 2 || string(col.Data[:2]) != `\x` {
			return nil, errors.New("not hex")
		}
		out := make([]byte, (len(col.Data)-2)/2)
		_, err := fmt.Sscanf(string(col.Data[2:]), "%x", &out)
		return out, err
	}
	return nil, nil
}
