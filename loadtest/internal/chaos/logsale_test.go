package chaos

import (
	"errors"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
)

// The log sale's bookkeeping: an order answered 201 holds a use, and any
// other answer to it after that breaks the promise; a refusal may turn into
// a 201 later (a use given back meanwhile); a 503, a 429 or no answer is a
// retry, never a final answer.
func TestClosedSaleRecord(t *testing.T) {
	s := newClosedSale("http://127.0.0.1:1", "c", 1)
	s.record("a", http.StatusServiceUnavailable, "", nil)
	s.record("a", 0, "", errors.New("connection reset"))
	s.record("a", http.StatusCreated, "201", nil)
	s.record("a", http.StatusCreated, "201", nil) // sent again after its answer
	s.record("b", http.StatusTooManyRequests, "", nil)
	s.record("b", http.StatusConflict, "OUT_OF_STOCK", nil)
	s.record("c", http.StatusCreated, "201", nil)
	s.record("c", http.StatusConflict, "OUT_OF_STOCK", nil)
	s.record("d", http.StatusConflict, "ALREADY_USED", nil)
	s.record("d", http.StatusConflict, "OUT_OF_STOCK", nil)
	s.record("e", http.StatusConflict, "OUT_OF_STOCK", nil)
	s.record("e", http.StatusCreated, "201", nil)

	assert.Equal(t, map[string]bool{"a": true, "c": true, "e": true}, s.created())
	assert.Equal(t, 2, s.refused())
	assert.Equal(t, []string{"c: 201 then OUT_OF_STOCK"}, s.broken)
	assert.Equal(t, 12, s.sends)
	assert.Equal(t, 3, s.retries)
	assert.Equal(t, 2, s.unavailable)
	assert.Equal(t, 1, s.errors)
	assert.Equal(t, map[string]int{"503": 1, "429": 1, "error": 1, "201": 4, "409": 5}, s.statuses)
}
