package web_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/ledger/internal/ledgertest"
	"github.com/flashgate/flashgate/shared/api"
)

// TestVoucherCodes walks GET /internal/voucher-codes from the first page to
// the last: every page is in code order and at most api.VoucherCodesPage
// long, the pages follow one another, and the test's vouchers (standard and
// flash) are each listed once. A bad after= or an unknown parameter is 400.
func TestVoucherCodes(t *testing.T) {
	t.Parallel()
	l := ledgertest.New(t, ledgertest.Options{})
	prefix := ledgertest.NewCode(t)[:20]
	mine := []string{prefix + "a", prefix + "b", prefix + "c"}
	for i, code := range mine {
		l.CreateVoucher(t, ledgertest.Spec(code, 5, 1, i == 1))
	}
	var all []string
	after := ""
	for pages := 0; ; pages++ {
		require.Less(t, pages, 1000, "the pages never end")
		path := api.VoucherCodesPath
		if after != "" {
			path += "?after=" + after
		}
		r := l.Call(t, http.MethodGet, path, nil)
		require.Equal(t, http.StatusOK, r.Status, r.Raw)
		var page api.VoucherCodes
		require.NoError(t, json.Unmarshal([]byte(r.Raw), &page))
		require.LessOrEqual(t, len(page.Codes), api.VoucherCodesPage)
		require.True(t, slices.IsSorted(page.Codes), "page after %q is not in code order", after)
		if len(all) > 0 && len(page.Codes) > 0 {
			require.Less(t, all[len(all)-1], page.Codes[0], "pages overlap")
		}
		all = append(all, page.Codes...)
		if page.Next == nil {
			break
		}
		require.Equal(t, page.Codes[len(page.Codes)-1], *page.Next)
		after = *page.Next
	}
	for _, code := range mine {
		i, found := slices.BinarySearch(all, code)
		assert.True(t, found, "%s not listed", code)
		assert.False(t, found && i+1 < len(all) && all[i+1] == code, "%s listed twice", code)
	}
	r := l.Call(t, http.MethodGet, api.VoucherCodesPath+"?after="+prefix+"a", nil)
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	var page api.VoucherCodes
	require.NoError(t, json.Unmarshal([]byte(r.Raw), &page))
	require.GreaterOrEqual(t, len(page.Codes), 2)
	assert.Equal(t, mine[1:], page.Codes[:2], "the page after %s", mine[0])

	for _, bad := range []string{"?after=a%20b", "?after=" + prefix + "&after=x", "?limit=5", "?after=x%2Fy"} {
		r := l.Call(t, http.MethodGet, api.VoucherCodesPath+bad, nil)
		assert.Equal(t, http.StatusBadRequest, r.Status, "GET %s: %s", bad, r.Raw)
	}
}

// TestCreatePublishesChange: creating a voucher (standard or flash) names it
// on the change channel, so that every proxy adds it to the codes it knows
// at once rather than at its next re-read.
func TestCreatePublishesChange(t *testing.T) {
	t.Parallel()
	l := ledgertest.New(t, ledgertest.Options{})
	codes := ledgertest.Subscribe(t, l)
	for _, flash := range []bool{false, true} {
		code := ledgertest.NewCode(t)
		l.CreateVoucher(t, ledgertest.Spec(code, 5, 1, flash))
		ledgertest.Announced(t, codes, code)
	}
}
