package httpx

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/flashgate/flashgate/shared/api"
	"github.com/gin-gonic/gin"
)

const requestIDKey = "flashgate.requestID"

// requestIDField is api.HeaderRequestID as net/http keys it: read and written
// under this spelling, the header map is used without canonicalizing (and
// allocating) on every request.
var requestIDField = http.CanonicalHeaderKey(api.HeaderRequestID)

// RequestID takes the caller's X-Request-ID (when it is short and printable) or
// makes one, echoes it in the response, and keeps it on the context.
func RequestID() gin.HandlerFunc {
	ids := &idSource{prefix: strconv.FormatInt(time.Now().UnixNano()%1e9, 36) + "-"}
	return func(c *gin.Context) {
		in := c.Request.Header.Get(requestIDField)
		slot := ids.slot(validRequestID(in))
		if slot[0] == "" {
			slot[0] = in
		}
		// The slot is at once the response header's value and, by pointer,
		// the context's: no allocation of either per request.
		c.Set(requestIDKey, &slot[0])
		c.Writer.Header()[requestIDField] = slot
	}
}

// RequestIDFrom returns the request id stored by RequestID, or "".
func RequestIDFrom(ctx context.Context) string {
	if id, ok := ctx.Value(requestIDKey).(*string); ok {
		return *id
	}
	return ""
}

// idChunk is how many request ids and header values idSource makes at once.
const idChunk = 256

// idSource hands out header values ([]string of length and capacity 1, cut
// from a shared array) and, when asked, a new id in them ("prefix-seq" in base
// 36, formatted idChunk at a time into one string): the request-id path then
// allocates once per idChunk requests instead of two or three times each.
type idSource struct {
	prefix string

	mu    sync.Mutex
	seq   uint64
	slots []string // unused header values
	ids   []string // unused ids
}

// slot returns a fresh header value: empty when given (the caller's own id
// goes in it), else holding a new id.
func (s *idSource) slot(given bool) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.slots) == 0 {
		s.slots = make([]string, idChunk)
	}
	v := s.slots[:1:1]
	s.slots = s.slots[1:]
	if !given {
		if len(s.ids) == 0 {
			s.fill()
		}
		v[0], s.ids = s.ids[0], s.ids[1:]
	}
	return v
}

// fill formats the next idChunk ids into one string and slices it.
func (s *idSource) fill() {
	buf := make([]byte, 0, idChunk*(len(s.prefix)+8))
	ends := make([]int, idChunk)
	for i := range ends {
		s.seq++
		buf = append(buf, s.prefix...)
		buf = strconv.AppendUint(buf, s.seq, 36)
		ends[i] = len(buf)
	}
	all := string(buf)
	s.ids = make([]string, idChunk)
	begin := 0
	for i, end := range ends {
		s.ids[i] = all[begin:end]
		begin = end
	}
}
