package failures

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
)

// Ingest reads dead-letter queues into a ledger: a batch of dead letters
// at a time, recorded in one transaction, each acknowledged only once it
// has committed. A crash before the acknowledgements hands the batch to
// the next reader, and the ledger records each failure once all the same.
type Ingest struct {
	// Subscriber reads a queue by its name (a transport's dead letters).
	Subscriber message.Subscriber
	Queues     []string
	Ledger     Ledger
	// Batch is the most dead letters recorded in one transaction, and
	// Linger how long a batch waits for more once it has one.
	Batch  int
	Linger time.Duration
	// Now stamps the dead letters that carry no failure time; one queue's
	// reader calls it while another's does.
	Now    func() time.Time
	Logger *slog.Logger
	// Recorded, when set, is told of each batch committed: how many dead
	// letters it held, and when the oldest of them failed.
	Recorded func(n int, oldest time.Time)
}

// delivery is a dead letter and its row in the ledger.
type delivery struct {
	msg     *message.Message
	failure Failure
}

// Retry pauses of a batch the ledger did not take: the database is away.
const (
	firstRecordPause = 500 * time.Millisecond
	maxRecordPause   = 30 * time.Second
)

// Run ingests until ctx ends. A batch the ledger does not take is tried
// again after a pause, growing to maxRecordPause, and is sent back to its
// queues when ctx ends first: nothing read is lost.
func (in *Ingest) Run(ctx context.Context) error {
	deliveries := make(chan delivery)
	var forwarders sync.WaitGroup
	defer forwarders.Wait()
	for _, q := range in.Queues {
		msgs, err := in.Subscriber.Subscribe(ctx, q)
		if err != nil {
			return fmt.Errorf("failures: read the dead letters of %s: %w", q, err)
		}
		forwarders.Add(1)
		go func() {
			defer forwarders.Done()
			// Each dead letter becomes its row here, as it arrives, while
			// the batch it joins is still being gathered.
			for msg := range msgs {
				select {
				case deliveries <- delivery{msg, FromMessage(q, msg, in.Now())}:
				case <-ctx.Done():
					msg.Nack()
				}
			}
		}()
	}
	for {
		batch, ok := in.collect(ctx, deliveries)
		if !ok {
			return nil
		}
		in.record(ctx, batch)
	}
}

// collect waits for a dead letter, then for more until the batch is full
// or Linger has passed. It returns false when ctx ends first.
func (in *Ingest) collect(ctx context.Context, deliveries <-chan delivery) ([]delivery, bool) {
	var batch []delivery
	select {
	case d := <-deliveries:
		batch = append(batch, d)
	case <-ctx.Done():
		return nil, false
	}
	linger := time.NewTimer(in.Linger)
	defer linger.Stop()
	for len(batch) < in.Batch {
		select {
		case d := <-deliveries:
			batch = append(batch, d)
		case <-linger.C:
			return batch, true
		case <-ctx.Done():
			return batch, true
		}
	}
	return batch, true
}

// record records batch, trying again while the ledger refuses it, then
// acknowledges each dead letter; when ctx ends first it sends them back.
func (in *Ingest) record(ctx context.Context, batch []delivery) {
	fs := make([]Failure, len(batch))
	oldest := time.Time{}
	for i, d := range batch {
		fs[i] = d.failure
		if oldest.IsZero() || fs[i].LastFailureAt.Before(oldest) {
			oldest = fs[i].LastFailureAt
		}
	}
	pause := firstRecordPause
	for {
		// The batch commits whole even as ctx ends: its dead letters are
		// in hand, and answering them needs the outcome.
		n, err := in.Ledger.Record(context.WithoutCancel(ctx), fs)
		if err == nil {
			for _, d := range batch {
				d.msg.Ack()
			}
			in.Logger.DebugContext(ctx, "dead letters recorded in the failure ledger", "dead_letters", len(batch), "recorded", n)
			if in.Recorded != nil {
				in.Recorded(len(batch), oldest)
			}
			return
		}
		in.Logger.ErrorContext(ctx, "the failure ledger did not take dead letters: trying again after a pause; they stay in their queues meanwhile",
			"dead_letters", len(batch), "pause", pause, "error", err)
		select {
		case <-time.After(pause):
			pause = min(2*pause, maxRecordPause)
		case <-ctx.Done():
			for _, d := range batch {
				d.msg.Nack()
			}
			return
		}
	}
}
