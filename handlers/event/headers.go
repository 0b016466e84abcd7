package event

// Headers moenda sets on the copies it makes of a failed message: the
// retry copies that wait in the broker, and the dead letter. Their names
// are a stable contract: dead-letter tools group and filter by them.
const (
	// HeaderAttempts counts the deliveries that have failed so far.
	HeaderAttempts = "moenda-attempts"
	// HeaderReason is the reason class of a dead letter (see Reason*).
	HeaderReason = "moenda-reason"
	// HeaderError is the text of the last error.
	HeaderError = "moenda-error"
	// HeaderQueue and HeaderHandler name the consumer that failed.
	HeaderQueue   = "moenda-queue"
	HeaderHandler = "moenda-handler"
	// HeaderFirstFailureAt and HeaderLastFailureAt are RFC 3339 times.
	HeaderFirstFailureAt = "moenda-first-failure-at"
	HeaderLastFailureAt  = "moenda-last-failure-at"
	// HeaderOriginalExchange and HeaderOriginalRoutingKey say where the
	// message was first published, before any retry queue.
	HeaderOriginalExchange   = "moenda-original-exchange"
	HeaderOriginalRoutingKey = "moenda-original-routing-key"
	// HeaderEventID and HeaderCorrelationID repeat the envelope's ids, so a
	// dead letter whose body cannot be read still names them.
	HeaderEventID       = "moenda-event-id"
	HeaderCorrelationID = "moenda-correlation-id"
	// HeaderTruncated is set on a dead letter whose body was cut to fit
	// the broker's record limit: the body's length before, in bytes. An
	// event published through the outbox is still there in full for
	// outbox.retention.
	HeaderTruncated = "moenda-truncated"
)

// Metadata a broker adapter sets on each message it delivers: where this
// delivery came from. They describe the delivery, not the event, so
// adapters never publish them as headers.
const (
	MetaDeliveryExchange   = "moenda-delivery-exchange"
	MetaDeliveryRoutingKey = "moenda-delivery-routing-key"
	// MetaRedelivered is set ("true") on a delivery the broker had handed
	// out before: to a consumer that stopped, crashed or lost its
	// connection with it in hand, or that requeued it.
	MetaRedelivered = "moenda-redelivered"
)
