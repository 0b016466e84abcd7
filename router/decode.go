package router

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/moenda/moenda/handlers/event"
)

var errNotDecoded = errors.New("the chain ran the handler without decoding the message")

// Decode decodes the envelope, in the queue's format (event.DecodeAs), and
// puts the event, with its correlation and causation ids, in the
// message's context. A body that is not a valid
// envelope fails permanently with its reason class. Of the events the
// queue receives, those whose type is not in handles (when handles is not
// empty) are acknowledged and counted as ignored: a queue bound with #
// receives everything, and subscribers ignore unknown types. A handled
// type in a version not in handles fails permanently (unknown_version). A
// body over maxBytes (when positive) fails permanently (too_large)
// unread: a handler's memory is not for whatever a client published. A
// delivery the broker marked as redelivered is counted (Redelivered)
// before anything else.
func Decode(envelope string, handles []string, maxBytes int, stats *QueueStats, logger *slog.Logger) message.HandlerMiddleware {
	versions := versionsOf(handles)
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			if msg.Metadata.Get(event.MetaRedelivered) != "" {
				stats.Redelivered.Add(1)
			}
			if maxBytes > 0 && len(msg.Payload) > maxBytes {
				return nil, event.Reject(event.ReasonTooLarge, fmt.Errorf("the body is %d bytes, more than router.max_message_bytes (%d)", len(msg.Payload), maxBytes))
			}
			e, err := event.DecodeAs(envelope, msg.Payload, msg.Metadata)
			if err != nil {
				return nil, err
			}
			handled, err := accepts(versions, e)
			if err != nil {
				return nil, err
			}
			if !handled {
				stats.Ignored.Add(1)
				logger.DebugContext(msg.Context(), "event type not handled here: ignored",
					"event_id", e.ID, "event_name", e.Name, "correlation_id", e.CorrelationID)
				return nil, nil
			}
			msg.SetContext(withEvent(msg.Context(), e))
			return h(msg)
		}
	}
}

// versionsOf maps each base name of handles to the versions handled.
func versionsOf(handles []string) map[string][]int {
	versions := map[string][]int{}
	for _, h := range handles {
		if n, err := event.ParseName(h); err == nil {
			versions[n.Base] = append(versions[n.Base], n.Version)
		}
	}
	return versions
}

// accepts says whether a route handling versions handles e: every event
// when versions is empty, else those of a listed type, and a listed type
// in another version is a permanent failure (unknown_version).
func accepts(versions map[string][]int, e event.Event) (bool, error) {
	if len(versions) == 0 {
		return true, nil
	}
	n, _ := event.ParseName(e.Name) // valid: Decode checked it
	handled, known := versions[n.Base]
	if !known {
		return false, nil
	}
	if !slices.Contains(handled, n.Version) {
		return false, event.Reject(event.ReasonUnknownVersion, fmt.Errorf("%s: this handler handles versions %v of %s", e.Name, handled, n.Base))
	}
	return true, nil
}
