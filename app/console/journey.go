package console

import (
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/moenda/moenda/adapters/failures"
	"github.com/moenda/moenda/adapters/outbox"
	"github.com/moenda/moenda/adapters/redrive"
)

// journey is one event's life as GET /v1/admin/journeys answers it.
type journey struct {
	EventID   string              `json:"event_id"`
	EventName string              `json:"event_name"`
	Outbox    *outbox.Passage     `json:"outbox"`
	Queues    []queueVisit        `json:"queues"`
	Failures  []failures.Failure  `json:"failures"`
	Redrives  []redrive.EventItem `json:"redrives"`
}

// queueVisit is a queue the event reaches, and when it handled it.
type queueVisit struct {
	Queue     string     `json:"queue"`
	Handled   bool       `json:"handled"`
	HandledAt *time.Time `json:"handled_at"`
}

// moment is one line of a journey's timeline: when (zero when the
// ledger does not say), where, what, and how it went.
type moment struct {
	At    time.Time
	Where string
	What  string
	Kind  string // ok, wait, fail: the line's mark
	Link  string // a page about it, relative to the console's root
}

// timeline orders what a journey holds: the commit, each relay group,
// each queue's handling (or its absence), each failure and each
// re-drive of the event.
func (j journey) timeline() []moment {
	var out []moment
	if o := j.Outbox; o != nil {
		out = append(out, moment{At: o.CommittedAt, Where: "outbox", What: "committed", Kind: "ok"})
		for _, g := range o.Groups {
			m := moment{Where: "relay " + g.Group, What: "relayed", Kind: "ok"}
			switch {
			case g.Parked != "":
				m.What, m.Kind = "parked: "+g.Parked, "fail"
			case !g.Passed:
				m.What, m.Kind = "not relayed yet", "wait"
			}
			out = append(out, m)
		}
	} else {
		out = append(out, moment{Where: "outbox", What: "not in the outbox (published elsewhere, pruned by outbox.retention, or the memory broker)", Kind: "wait"})
	}
	for _, f := range j.Failures {
		out = append(out, moment{At: f.FirstFailureAt, Where: f.FailedQueue, What: "failed (" + f.Reason + "): " + f.Error, Kind: "fail",
			Link: "failures/" + itoa(f.ID)})
		out = append(out, moment{At: f.LastFailureAt, Where: f.Queue, What: "dead-lettered after " + itoa(int64(f.Attempts)) + " attempt(s); now " + string(f.Status), Kind: "fail",
			Link: "failures/" + itoa(f.ID)})
	}
	for _, it := range j.Redrives {
		m := moment{At: it.SentAt, Where: it.Queue, What: "re-drive " + itoa(it.RedriveID) + ": " + string(it.State), Kind: "wait", Link: "redrives/" + itoa(it.RedriveID)}
		switch it.State {
		case redrive.Handled:
			m.Kind = "ok"
		case redrive.FailedAgain, redrive.Unsettled:
			m.Kind = "fail"
		}
		out = append(out, m)
	}
	for _, q := range j.Queues {
		m := moment{Where: q.Queue, What: "not handled", Kind: "wait"}
		if q.Handled {
			m.What, m.Kind = "handled", "ok"
			if q.HandledAt != nil {
				m.At = *q.HandledAt
			}
		}
		out = append(out, m)
	}
	// Moments with a time in time order; those without stay where they
	// fell, after the one before them.
	sortStable(out)
	return out
}

// sortStable orders the timed moments among themselves, leaving untimed
// ones after what precedes them.
func sortStable(ms []moment) {
	for i := 1; i < len(ms); i++ {
		for j := i; j > 0 && !ms[j].At.IsZero() && !ms[j-1].At.IsZero() && ms[j].At.Before(ms[j-1].At); j-- {
			ms[j], ms[j-1] = ms[j-1], ms[j]
		}
	}
}

// journeyView is a journey and its timeline.
type journeyView struct {
	journey
	Timeline []moment
}

// journeyPage finds the journeys of an event id or a correlation id.
func (c *Console) journeyPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	id, corr := strings.TrimSpace(q.Get("event_id")), strings.TrimSpace(q.Get("correlation_id"))
	data := map[string]any{"EventID": id, "CorrelationID": corr}
	if id == "" && corr == "" {
		c.render(w, r, http.StatusOK, "journey", "Journey", data)
		return
	}
	aq := url.Values{}
	if id != "" {
		aq.Set("event_id", id)
	} else {
		aq.Set("correlation_id", corr)
	}
	var out struct {
		Journeys []journey `json:"journeys"`
	}
	if status, err := c.call(r.Context(), requestOf(r).session, http.MethodGet, "/v1/admin/journeys", aq, &out); err != nil {
		c.fail(w, r, status, err)
		return
	}
	views := make([]journeyView, 0, len(out.Journeys))
	for _, j := range out.Journeys {
		views = append(views, journeyView{journey: j, Timeline: j.timeline()})
	}
	data["Journeys"], data["Searched"] = views, true
	c.render(w, r, http.StatusOK, "journey", "Journey", data)
}
