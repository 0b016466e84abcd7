package outbox

import (
	"errors"
	"fmt"
	"slices"
)

// ErrRefused marks the failure of a message the broker will never take as
// it is (larger than its record limit, a record it calls invalid): sending
// it again fails the same way. A Destination wraps such a failure with it,
// in a BatchError, and the relay parks the row (ReasonRefused) instead of
// retrying the batch forever.
var ErrRefused = errors.New("refused by the broker for good")

// BatchError is a Destination's answer when a batch was delivered in part:
// the messages it lists, by their index in the batch, were not delivered,
// each for its own reason; every other one was confirmed. The relay sends
// again only the listed messages whose reason is not ErrRefused, so the
// delivered ones do not go out again on every retry.
type BatchError struct {
	Failed map[int]error
}

func (e *BatchError) Error() string {
	idx := make([]int, 0, len(e.Failed))
	for i := range e.Failed {
		idx = append(idx, i)
	}
	slices.Sort(idx)
	if len(idx) == 0 {
		return "no message failed"
	}
	first := e.Failed[idx[0]]
	if len(idx) == 1 {
		return fmt.Sprintf("1 message not delivered: %v", first)
	}
	return fmt.Sprintf("%d messages not delivered, the first: %v", len(idx), first)
}

// Unwrap lets errors.Is and errors.As see the failures.
func (e *BatchError) Unwrap() []error {
	errs := make([]error, 0, len(e.Failed))
	for _, err := range e.Failed {
		errs = append(errs, err)
	}
	return errs
}
