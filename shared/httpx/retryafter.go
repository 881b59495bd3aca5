package httpx

import (
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/flashgate/flashgate/shared/api"
)

// Retry-After is written here only (SetRetryAfter), so that every 503 and 429
// of both services spreads its clients' retries the same way.
const (
	// RetryAfterLeast is the least Retry-After, in seconds.
	RetryAfterLeast = 1
	// RetryAfterSpread is the jitter added to it: a uniform 0 to this many
	// whole seconds more, drawn per answer. A constant Retry-After sends every
	// client shed in one second back in one second, together; drawn from 1-3 s
	// they come back over two.
	RetryAfterSpread = 2
)

// RetryAfterSeconds returns a Retry-After, in whole seconds, for an answer
// that asks to come back no sooner than least: least rounded up (at least
// RetryAfterLeast) plus a jitter of 0 to RetryAfterSpread seconds.
func RetryAfterSeconds(least time.Duration) int {
	n := max(int((least+time.Second-1)/time.Second), RetryAfterLeast)
	return n + rand.IntN(RetryAfterSpread+1)
}

// SetRetryAfter writes the answer's Retry-After (RetryAfterSeconds(least)) and
// returns it.
func SetRetryAfter(c *gin.Context, least time.Duration) time.Duration {
	n := RetryAfterSeconds(least)
	c.Header(api.HeaderRetryAfter, strconv.Itoa(n))
	return time.Duration(n) * time.Second
}

// RetryAfterOf reads the Retry-After an answer's header carries; ok is false
// when it has none (or not a whole number of seconds).
func RetryAfterOf(h http.Header) (d time.Duration, ok bool) {
	n, err := strconv.Atoi(h.Get(api.HeaderRetryAfter))
	if err != nil || n < 0 {
		return 0, false
	}
	return time.Duration(n) * time.Second, true
}
