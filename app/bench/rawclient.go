package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// RawPublishJob is the work of the raw publisher run as a process of its
// own (`moenda bench raw-publish`), so that the CPU it uses is read from
// /proc apart from the bench's, as serve's is: the publish ceiling's
// client. Message's headers are strings (amqp.Marshaler's), which JSON
// carries unchanged.
type RawPublishJob struct {
	URL      string             `json:"url"`
	Exchange string             `json:"exchange"`
	Key      string             `json:"key"`
	Messages int                `json:"messages"`
	Message  amqp091.Publishing `json:"message"`
}

// RawPublish reads a RawPublishJob from r and publishes its messages, in
// confirm mode with the ceiling's window, on a connection of its own.
// Then it waits for r to end: the bench reads its CPU before it exits.
func RawPublish(ctx context.Context, r io.Reader) error {
	var job RawPublishJob
	dec := json.NewDecoder(r)
	if err := dec.Decode(&job); err != nil {
		return fmt.Errorf("bench raw-publish: read the job from standard input: %w", err)
	}
	p, err := dialRawPublisher(job.URL, job.Exchange, job.Key, job.Message)
	if err != nil {
		return fmt.Errorf("bench raw-publish: %w", err)
	}
	defer p.close()
	if err := p.publish(ctx, job.Messages); err != nil {
		return fmt.Errorf("bench raw-publish: %w", err)
	}
	_, err = io.Copy(io.Discard, dec.Buffered())
	if err == nil {
		_, err = io.Copy(io.Discard, r)
	}
	return err
}

// startRawPublisher runs `bench raw-publish` of serve's binary with job.
// The process publishes, then lives on until finish is called, so that
// its CPU can be read; exited receives how it ended.
func (e *env) startRawPublisher(ctx context.Context, job RawPublishJob) (pid int, finish func(), exited <-chan error, err error) {
	in, err := json.Marshal(job)
	if err != nil {
		return 0, nil, nil, err
	}
	cmd := exec.CommandContext(ctx, e.opts.ServeBin, "bench", "raw-publish")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return 0, nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return 0, nil, nil, fmt.Errorf("start %s bench raw-publish: %w", e.opts.ServeBin, err)
	}
	ended := make(chan error, 1)
	go func() { ended <- cmd.Wait() }()
	if _, err := stdin.Write(in); err != nil {
		_ = cmd.Process.Kill()
		return 0, nil, nil, fmt.Errorf("bench raw-publish: write its job: %w (it ended: %v)", err, <-ended)
	}
	return cmd.Process.Pid, func() { _ = stdin.Close() }, ended, nil
}
