package overload

import (
	"bytes"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A storm is logged at once, then at most once a second with the count and
// causes since the line before and the latest request id; the refusals of
// its last second are logged when that second is over.
func TestStormLogsOnceASecond(t *testing.T) {
	var logs bytes.Buffer
	var mu sync.Mutex
	log := slog.New(slog.NewJSONHandler(lockedWriter{&logs, &mu}, nil))
	read := func() []stormLogLine {
		mu.Lock()
		defer mu.Unlock()
		return stormLines(t, logs.String())
	}
	var st Storm
	t0 := time.Now()
	refuse := func(at time.Duration, id, cause string) {
		st.Add(t0.Add(at), log, Refusal{RequestID: id, Route: "/r", Method: "POST", Cause: cause})
	}

	refuse(0, "r1", shedFull)
	require.Len(t, read(), 1, "the first refusal of a storm is logged at once")
	for i, cause := range []string{shedFull, shedStanding, shedStanding} {
		refuse(time.Duration(i+1)*100*time.Millisecond, "r"+string(rune('2'+i)), cause)
	}
	require.Len(t, read(), 1, "refusals within the second wait for their line")
	refuse(1100*time.Millisecond, "r5", shedWaited)
	lines := read()
	require.Len(t, lines, 2)
	require.Equal(t, stormLogLine{Level: "WARN", Msg: "requests shed", Shed: 4, RequestID: "r5", Err: shedWaited,
		Causes: map[string]uint64{shedFull: 1, shedStanding: 2, shedWaited: 1}}, lines[1])

	refuse(1200*time.Millisecond, "r6", shedFull) // the storm's last refusal
	require.Len(t, read(), 2)
	require.Eventually(t, func() bool { return len(read()) == 3 }, 3*time.Second, 20*time.Millisecond,
		"the last second's refusals are logged when it is over")
	require.Equal(t, stormLogLine{Level: "WARN", Msg: "requests shed", Shed: 1, RequestID: "r6", Err: shedFull,
		Causes: map[string]uint64{shedFull: 1}}, read()[2])
}
