package kafka

import (
	"fmt"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/moenda/moenda/adapters/topology"
)

// partition names one partition of a topic.
type partition struct {
	topic string
	id    int32
}

// Replay follows a consumer group that reads a queue's topics again, from
// the offsets Rewind set, up to the end they had when it was set.
type Replay struct {
	mu       sync.Mutex
	start    map[partition]int64
	end      map[partition]int64
	next     map[partition]int64 // offset after the last record done
	read     int64
	finished chan struct{}
	closed   bool
}

// Rewind points group at the records of queue's exchange topics stamped at
// or after from (the zero time: the oldest records), so that a consumer in
// the group reads them again, and returns what the replay must read. The
// queue's retry topics are set to their end: copies waiting there belong
// to the live readers. Offsets are committed explicitly, so this works for
// a new group and for one with committed offsets alike; the group must
// have no member running.
func Rewind(cfg Config, top *topology.Topology, queue, group string, from time.Time) (*Replay, error) {
	srcs, err := sources(cfg, top, queue)
	if err != nil {
		return nil, err
	}
	r := &Replay{start: map[partition]int64{}, end: map[partition]int64{}, next: map[partition]int64{}, finished: make(chan struct{})}
	err = withClient(cfg, "moenda replay", func(client sarama.Client) error {
		topics := make([]string, len(srcs))
		for i, src := range srcs {
			topics[i] = src.topic
		}
		if err := createTopics(client, cfg, topics); err != nil {
			return err
		}
		commit := map[string]map[int32]sarama.OffsetAndMetadata{}
		for _, src := range srcs {
			ids, err := client.Partitions(src.topic)
			if err != nil {
				return fmt.Errorf("kafka: partitions of %s: %w", src.topic, err)
			}
			commit[src.topic] = map[int32]sarama.OffsetAndMetadata{}
			for _, id := range ids {
				end, err := client.GetOffset(src.topic, id, sarama.OffsetNewest)
				if err != nil {
					return fmt.Errorf("kafka: end of %s/%d: %w", src.topic, id, err)
				}
				start := end
				if src.delay == 0 {
					if start, err = offsetAt(client, src.topic, id, from, end); err != nil {
						return err
					}
					p := partition{src.topic, id}
					r.start[p], r.end[p], r.next[p] = start, end, start
				}
				commit[src.topic][id] = sarama.OffsetAndMetadata{Offset: start, LeaderEpoch: -1}
			}
		}
		admin, err := sarama.NewClusterAdminFromClient(client)
		if err != nil {
			return fmt.Errorf("kafka: admin: %w", err)
		}
		resp, err := admin.AlterConsumerGroupOffsets(cfg.Group(group), commit, nil)
		if err != nil {
			return fmt.Errorf("kafka: set the offsets of group %s: %w", cfg.Group(group), err)
		}
		for topic, parts := range resp.Errors {
			for id, kerr := range parts {
				if kerr != sarama.ErrNoError {
					return fmt.Errorf("kafka: set the offset of group %s on %s/%d: %w (is a member of the group still running?)", cfg.Group(group), topic, id, kerr)
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	r.check()
	return r, nil
}

// offsetAt is the first offset of a record stamped at or after from, the
// oldest for the zero time, or end when no record is that recent.
func offsetAt(client sarama.Client, topic string, id int32, from time.Time, end int64) (int64, error) {
	at := sarama.OffsetOldest
	if !from.IsZero() {
		at = from.UnixMilli()
	}
	off, err := client.GetOffset(topic, id, at)
	if err != nil {
		return 0, fmt.Errorf("kafka: offset of %s/%d at %v: %w", topic, id, from, err)
	}
	if off < 0 {
		return end, nil
	}
	return off, nil
}

// Record takes note of a record the replay's handler is done with; give it
// to NewSubscriber as onDone.
func (r *Replay) Record(d Done) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := partition{d.Topic, d.Partition}
	end, ok := r.end[p]
	if !ok || d.Offset < r.next[p] || d.Offset >= end {
		return // a retry copy, a redelivery, or live traffic past the end
	}
	r.read += d.Offset + 1 - r.next[p]
	r.next[p] = d.Offset + 1
	r.checkLocked()
}

func (r *Replay) check() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.checkLocked()
}

func (r *Replay) checkLocked() {
	if r.closed {
		return
	}
	for p, end := range r.end {
		if r.next[p] < end {
			return
		}
	}
	r.closed = true
	close(r.finished)
}

// Finished is closed once every partition has been read to its end.
func (r *Replay) Finished() <-chan struct{} { return r.finished }

// Progress returns how many records were read and how many there are.
func (r *Replay) Progress() (read, total int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for p, end := range r.end {
		total += end - r.start[p]
	}
	return r.read, total
}
