package console

import (
	"net/http"
	"slices"
	"time"

	"github.com/moenda/moenda/adapters/redrive"
)

// status is GET /v1/admin/status's answer, the parts the Overview shows.
type status struct {
	At     time.Time `json:"at"`
	Config struct {
		Env          string `json:"env"`
		Role         string `json:"role"`
		Broker       string `json:"broker"`
		OutboxReader string `json:"outbox_reader"`
		Plugins      []struct {
			Name string `json:"name"`
		} `json:"plugins"`
	} `json:"config"`
	Readiness struct {
		Status        string            `json:"status"`
		Checks        map[string]string `json:"checks"`
		FailureIngest string            `json:"failure_ingest"`
	} `json:"readiness"`
	Relays []struct {
		ConsumerGroup string `json:"consumer_group"`
		Reader        string `json:"reader"`
		Leader        *struct {
			Application string    `json:"application"`
			Since       time.Time `json:"since"`
		} `json:"leader"`
		LagRows    int64   `json:"lag_rows"`
		LagSeconds float64 `json:"lag_seconds"`
		ParkedRows int64   `json:"parked_rows"`
		Slot       *struct {
			Name          string `json:"name"`
			RetainedBytes int64  `json:"retained_bytes"`
		} `json:"slot"`
	} `json:"relays"`
	Queues []struct {
		Name               string `json:"name"`
		Messages           *int   `json:"messages"`
		Consumers          *int   `json:"consumers"`
		DeadLetterQueue    string `json:"dead_letter_queue"`
		DeadLetters        *int   `json:"dead_letters"`
		UnresolvedFailures int    `json:"unresolved_failures"`
		Handling           *struct {
			HandledPerSecond float64 `json:"handled_per_second"`
			FailedPerSecond  float64 `json:"failed_per_second"`
		} `json:"handling"`
	} `json:"queues"`
	UnresolvedFailures map[string]int    `json:"unresolved_failures"`
	Redrives           []redrive.Redrive `json:"redrives"`
	Problems           []string          `json:"problems"`
}

// overview is the Overview page's data: the status, and the unresolved
// failures by queue in the order of their count.
type overview struct {
	status
	Unresolved      []queueCount
	TotalUnresolved int
}

type queueCount struct {
	Queue string
	Count int
}

// overviewPage shows the platform at a glance, from GET /v1/admin/status.
// Its figures part asks for itself again every few seconds (the status
// is read at most every 2 s, however many pages ask).
func (c *Console) overviewPage(w http.ResponseWriter, r *http.Request) {
	var s status
	if code, err := c.call(r.Context(), requestOf(r).session, http.MethodGet, "/v1/admin/status", nil, &s); err != nil {
		c.fail(w, r, code, err)
		return
	}
	o := overview{status: s}
	for q, n := range s.UnresolvedFailures {
		o.Unresolved = append(o.Unresolved, queueCount{q, n})
		o.TotalUnresolved += n
	}
	slices.SortFunc(o.Unresolved, func(a, b queueCount) int {
		if a.Count != b.Count {
			return b.Count - a.Count
		}
		if a.Queue < b.Queue {
			return -1
		}
		return 1
	})
	c.render(w, r, http.StatusOK, "overview", "Overview", o)
}
