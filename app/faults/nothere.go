package faults

// Why some cases do not run in `moenda faults`, and what shows their
// subject instead. RELIABILITY.md prints these beside the results.
const (
	notHereKafka = "not run by this command: kfake runs inside a test process. " +
		"`go test ./app -run 'Replay|KafkaPoison|KafkaRetry|KafkaAway'` replays into analytics, dead-letters a poison record while its partition advances, and catches up after an outage"
)
