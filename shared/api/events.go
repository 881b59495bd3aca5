package api

import (
	"time"

	"github.com/flashgate/flashgate/shared/events"
)

// EventPage is one page of GET RouteEvents without status: events in id
// order, and the after to ask for the next page with (the last id here, or the
// after asked when the page is empty: poll again later).
type EventPage struct {
	Events    []events.Event `json:"events"`
	NextAfter int64          `json:"nextAfter"`
}

// ParkedPage is one page of GET RouteEvents with status (failed or retry).
// The spec describes both pages with one schema, EventPage, whose entries
// carry the parked fields exactly when status was asked.
type ParkedPage struct {
	Events    []ParkedEvent `json:"events"`
	NextAfter int64         `json:"nextAfter"`
}

// ParkedEvent is an event a sink gave up on, with that sink's failure.
type ParkedEvent struct {
	events.Event
	Sink      string    `json:"sink"`
	Status    string    `json:"status"` // FAILED, or RETRY once asked to send again
	Attempts  int       `json:"attempts"`
	LastError string    `json:"lastError"`
	FailedAt  time.Time `json:"failedAt"`
}

// Retrying is the 202 answer of POST RouteEventRetry: the failures of the
// event that will be sent again, one per sink that parked it.
type Retrying struct {
	Retrying []ParkedEvent `json:"retrying"`
}
