package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// rawStreamSlot is the raw reader's slot: temporary, so it ends with the
// connection that made it.
const rawStreamSlot = "moenda_bench_raw_stream"

// rawStream is the reading ceiling of the logical relay: pglogrepl alone
// reading n rows the bench writes after it made its slot, from the
// outbox's publication as the relay asks for it (pgoutput, binary
// values), counting the inserts by their first byte and confirming the
// stream's position once at the end. It does none of the relay's own
// work: no row decoded into a message, no position recorded in the
// database. It is timed
// from the start of the stream to its n-th row, in this process.
func (e *env) rawStream(ctx context.Context, n int) (flow, error) {
	cfg, err := pgconn.ParseConfig(e.onDatabase(e.dbName))
	if err != nil {
		return flow{}, err
	}
	cfg.RuntimeParams["replication"] = "database"
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return flow{}, fmt.Errorf("raw stream: connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	slot, err := pglogrepl.CreateReplicationSlot(ctx, conn, rawStreamSlot, "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{Temporary: true, Mode: pglogrepl.LogicalReplication})
	if err != nil {
		return flow{}, fmt.Errorf("raw stream: create its slot: %w", err)
	}
	from, err := pglogrepl.ParseLSN(slot.ConsistentPoint)
	if err != nil {
		return flow{}, fmt.Errorf("raw stream: %w", err)
	}
	if err := e.fill(ctx, n); err != nil {
		return flow{}, fmt.Errorf("fill the outbox: %w", err)
	}
	return timed(func() (int, error) {
		err := pglogrepl.StartReplication(ctx, conn, rawStreamSlot, from, pglogrepl.StartReplicationOptions{
			PluginArgs: []string{"proto_version '1'", "publication_names 'moenda_outbox'", "binary 'true'"}})
		if err != nil {
			return 0, fmt.Errorf("raw stream: start: %w", err)
		}
		rows, end, err := readRows(ctx, conn, n)
		if err != nil {
			return 0, err
		}
		err = pglogrepl.SendStandbyStatusUpdate(ctx, conn, pglogrepl.StandbyStatusUpdate{WALWritePosition: end})
		return rows, err
	})
}

// readRows reads the stream on conn until n inserts have come and the
// transaction of the last has committed; it returns how many came, and
// where that transaction ended. Its receives end at the connection's read deadline rather than at a
// context's, whose watch would cost each receive a goroutine's hand-off.
func readRows(ctx context.Context, conn *pgconn.PgConn, n int) (int, pglogrepl.LSN, error) {
	if err := conn.Conn().SetReadDeadline(time.Now().Add(5 * time.Minute)); err != nil {
		return 0, 0, err
	}
	defer context.AfterFunc(ctx, func() { _ = conn.Conn().SetReadDeadline(time.Now()) })()
	rows := 0
	for {
		msg, err := conn.ReceiveMessage(context.Background())
		if err != nil {
			return 0, 0, fmt.Errorf("raw stream: %d of %d rows: %w", rows, n, err)
		}
		var data []byte
		switch msg := msg.(type) {
		case *pgproto3.CopyData:
			data = msg.Data
		case *pgproto3.ErrorResponse:
			return 0, 0, fmt.Errorf("raw stream: %w", pgconn.ErrorResponseToPgError(msg))
		default:
			return 0, 0, fmt.Errorf("raw stream: unexpected %T", msg)
		}
		switch data[0] {
		case pglogrepl.PrimaryKeepaliveMessageByteID:
			ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
			if err != nil {
				return 0, 0, err
			}
			if ka.ReplyRequested {
				if err := pglogrepl.SendStandbyStatusUpdate(ctx, conn, pglogrepl.StandbyStatusUpdate{WALWritePosition: ka.ServerWALEnd}); err != nil {
					return 0, 0, err
				}
			}
		case pglogrepl.XLogDataByteID:
			xld, err := pglogrepl.ParseXLogData(data[1:])
			if err != nil {
				return 0, 0, err
			}
			switch pglogrepl.MessageType(xld.WALData[0]) {
			case pglogrepl.MessageTypeInsert:
				rows++
			case pglogrepl.MessageTypeCommit:
				if rows < n {
					break
				}
				m, err := pglogrepl.Parse(xld.WALData)
				if err != nil {
					return 0, 0, err
				}
				return rows, m.(*pglogrepl.CommitMessage).TransactionEndLSN, nil
			}
		}
	}
}
