package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/moenda/moenda/adapters/outbox"
)

// rawStreamSlot is the raw clients' slot: temporary, so it ends with the
// connection that made it.
const rawStreamSlot = "moenda_bench_raw_stream"

// rawStream is the reading ceiling of the logical relay: pglogrepl alone
// reading n rows the bench writes after it made its slot, counting the
// inserts by their first byte. It does none of the relay's own work: no
// row decoded into a message, no position recorded in the database. It
// is timed from the start of the stream to its n-th row, in this process.
func (e *env) rawStream(ctx context.Context, n int) (flow, error) {
	conn, from, err := e.rawSlot(ctx, n)
	if err != nil {
		return flow{}, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return timed(func() (int, error) { return streamRows(ctx, conn, from, n, nil) })
}

// rawRelay is the Kafka relay's like-for-like ceiling: pglogrepl reading
// n rows the bench writes after it made its slot, each insert decoded by
// pglogrepl.Parse and its metadata by encoding/json, and franz-go's
// producer, set as the relay's, publishing them to topic as the relay's records are made
// (the row's payload as the value, its metadata as headers, keyed by its
// uuid), batch rows at a time, while the reader fills the next batch. It
// records no position in the database, and confirms the stream once, at
// its end. It is timed from the start of the stream to the last batch's
// confirmation, in this process.
func (k *kafkaBench) rawRelay(ctx context.Context, e *env, topic string, n, batch int) (flow, error) {
	client, err := k.rawProducer(ctx, topic)
	if err != nil {
		return flow{}, err
	}
	defer client.Close()
	conn, from, err := e.rawSlot(ctx, n)
	if err != nil {
		return flow{}, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return k.timed(func() (int, error) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		batches := make(chan []*kgo.Record, 1)
		read := make(chan error, 1)
		go func() {
			defer close(batches)
			records := rawRecords{topic: topic, batch: batch, out: batches}
			if _, err := streamRows(ctx, conn, from, n, records.add); err != nil {
				read <- err
				return
			}
			read <- records.flush(ctx)
		}()
		sent := 0
		for recs := range batches {
			if err := client.ProduceSync(ctx, recs...).FirstErr(); err != nil {
				cancel()
				for range batches { // until the reader has stopped
				}
				return 0, err
			}
			sent += len(recs)
		}
		return sent, <-read
	})
}

// rawRecords turns the stream's inserts into records, and hands them over
// a batch at a time.
type rawRecords struct {
	topic         string
	batch         int
	out           chan<- []*kgo.Record
	uuid, payload int // the columns', by the relation message
	metadata      int
	pending       []*kgo.Record
}

// add takes a message of the stream: the relation's says where the
// columns are, and each insert becomes a record.
func (r *rawRecords) add(ctx context.Context, wal []byte) error {
	m, err := pglogrepl.Parse(wal)
	if err != nil {
		return err
	}
	switch m := m.(type) {
	case *pglogrepl.RelationMessage:
		for i, c := range m.Columns {
			switch c.Name {
			case "uuid":
				r.uuid = i
			case "payload":
				r.payload = i
			case "metadata":
				r.metadata = i
			}
		}
	case *pglogrepl.InsertMessage:
		cols := m.Tuple.Columns
		var meta map[string]string
		if err := json.Unmarshal(cols[r.metadata].Data, &meta); err != nil {
			return fmt.Errorf("raw relay: metadata: %w", err)
		}
		headers := make([]kgo.RecordHeader, 0, len(meta))
		for k, v := range meta {
			headers = append(headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
		}
		r.pending = append(r.pending, &kgo.Record{Topic: r.topic, Key: cols[r.uuid].Data, Value: cols[r.payload].Data, Headers: headers})
		if len(r.pending) == r.batch {
			return r.flush(ctx)
		}
	}
	return nil
}

// flush hands over the records not yet handed over.
func (r *rawRecords) flush(ctx context.Context) error {
	if len(r.pending) == 0 {
		return nil
	}
	select {
	case r.out <- r.pending:
		r.pending = make([]*kgo.Record, 0, r.batch)
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// rawSlot opens a replication connection with a temporary slot of its
// own, then writes n rows to the outbox for it to stream from where the
// slot begins, which it returns.
func (e *env) rawSlot(ctx context.Context, n int) (*pgconn.PgConn, pglogrepl.LSN, error) {
	cfg, err := pgconn.ParseConfig(e.onDatabase(e.dbName))
	if err != nil {
		return nil, 0, err
	}
	cfg.RuntimeParams["replication"] = "database"
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, 0, fmt.Errorf("raw stream: connect: %w", err)
	}
	fail := func(err error) (*pgconn.PgConn, pglogrepl.LSN, error) {
		conn.Close(context.WithoutCancel(ctx))
		return nil, 0, err
	}
	slot, err := pglogrepl.CreateReplicationSlot(ctx, conn, rawStreamSlot, "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{Temporary: true, Mode: pglogrepl.LogicalReplication})
	if err != nil {
		return fail(fmt.Errorf("raw stream: create its slot: %w", err))
	}
	from, err := pglogrepl.ParseLSN(slot.ConsistentPoint)
	if err != nil {
		return fail(fmt.Errorf("raw stream: %w", err))
	}
	if err := e.fill(ctx, n); err != nil {
		return fail(fmt.Errorf("fill the outbox: %w", err))
	}
	return conn, from, nil
}

// streamRows streams the outbox's publication on conn from the slot's
// position from, as the relay asks for it (pgoutput, binary values),
// until n inserts have come and the transaction of the last has
// committed, then confirms the stream up to there. each, if not nil, has
// every message of the stream but its transactions' begin and commit. It
// returns how many inserts came. Its receives end at the connection's
// read deadline rather than at a context's, whose watch would cost each
// receive a goroutine's hand-off.
func streamRows(ctx context.Context, conn *pgconn.PgConn, from pglogrepl.LSN, n int, each func(context.Context, []byte) error) (int, error) {
	err := pglogrepl.StartReplication(ctx, conn, rawStreamSlot, from, pglogrepl.StartReplicationOptions{
		PluginArgs: outbox.StreamArgs()})
	if err != nil {
		return 0, fmt.Errorf("raw stream: start: %w", err)
	}
	if err := conn.Conn().SetReadDeadline(time.Now().Add(5 * time.Minute)); err != nil {
		return 0, err
	}
	defer context.AfterFunc(ctx, func() { _ = conn.Conn().SetReadDeadline(time.Now()) })()
	rows := 0
	for {
		msg, err := conn.ReceiveMessage(context.Background())
		if err != nil {
			return 0, fmt.Errorf("raw stream: %d of %d rows: %w", rows, n, err)
		}
		var data []byte
		switch msg := msg.(type) {
		case *pgproto3.CopyData:
			data = msg.Data
		case *pgproto3.ErrorResponse:
			return 0, fmt.Errorf("raw stream: %w", pgconn.ErrorResponseToPgError(msg))
		default:
			return 0, fmt.Errorf("raw stream: unexpected %T", msg)
		}
		switch data[0] {
		case pglogrepl.PrimaryKeepaliveMessageByteID:
			ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
			if err != nil {
				return 0, err
			}
			if ka.ReplyRequested {
				if err := pglogrepl.SendStandbyStatusUpdate(ctx, conn, pglogrepl.StandbyStatusUpdate{WALWritePosition: ka.ServerWALEnd}); err != nil {
					return 0, err
				}
			}
		case pglogrepl.XLogDataByteID:
			xld, err := pglogrepl.ParseXLogData(data[1:])
			if err != nil {
				return 0, err
			}
			switch pglogrepl.MessageType(xld.WALData[0]) {
			case pglogrepl.MessageTypeBegin:
				continue
			case pglogrepl.MessageTypeCommit:
				if rows < n {
					continue
				}
				m, err := pglogrepl.Parse(xld.WALData)
				if err != nil {
					return 0, err
				}
				end := m.(*pglogrepl.CommitMessage).TransactionEndLSN
				return rows, pglogrepl.SendStandbyStatusUpdate(ctx, conn, pglogrepl.StandbyStatusUpdate{WALWritePosition: end})
			case pglogrepl.MessageTypeInsert:
				rows++
			}
			if each != nil {
				if err := each(ctx, xld.WALData); err != nil {
					return 0, err
				}
			}
		}
	}
}
