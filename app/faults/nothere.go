package faults

// Why some cases do not run in `moenda faults`, and what shows their
// subject instead. RELIABILITY.md prints these beside the results.
const (
	notHereHeaders = "not run by this command: moenda declares classic queues only, so there is no x-delivery-count to send. " +
		"Every poison event of T17 and T18 crosses the TTL retry tier and its x-death array"
	notHereKafka = "not run by this command: kfake runs inside a test process. " +
		"`go test ./app -run 'Replay|KafkaPoison|KafkaRetry|KafkaAway'` replays into analytics, dead-letters a poison record while its partition advances, and catches up after an outage"
)
