package web

import (
	"net/http"

	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/httpx"
)

// scopes are the scopes each of the ledger's routes takes (LEDGER_TOKENS'
// name:token:scope+scope); a route missing here is refused to every token.
// A proxy holds an internal token: besides the /internal routes it reads a
// voucher's terms, warms a voucher up, and relays its clients' reservation
// routes once it has checked their own tokens (PROXY_TOKENS), so those take
// internal too. Nothing else does: an internal token cannot change, list or
// export anything.
var scopes = httpx.RouteScopes{
	httpx.RouteKey(http.MethodPost, api.RouteReservations):  {httpx.ScopeReserve, httpx.ScopeInternal},
	httpx.RouteKey(http.MethodGet, api.RouteReservation):    {httpx.ScopeReserve, httpx.ScopeInternal},
	httpx.RouteKey(http.MethodPost, api.RouteConfirm):       {httpx.ScopeSettle, httpx.ScopeInternal},
	httpx.RouteKey(http.MethodDelete, api.RouteReservation): {httpx.ScopeSettle, httpx.ScopeInternal},
	httpx.RouteKey(http.MethodPost, api.RouteRefund):        {httpx.ScopeSettle, httpx.ScopeInternal},

	httpx.RouteKey(http.MethodGet, api.RouteVouchers):            {httpx.ScopeRead},
	httpx.RouteKey(http.MethodGet, api.RouteVoucher):             {httpx.ScopeRead, httpx.ScopeInternal}, // the proxy's terms
	httpx.RouteKey(http.MethodGet, api.RouteVoucherReservations): {httpx.ScopeRead},
	httpx.RouteKey(http.MethodGet, api.RouteExport):              {httpx.ScopeRead},
	httpx.RouteKey(http.MethodGet, api.RouteAudit):               {httpx.ScopeRead},
	httpx.RouteKey(http.MethodGet, api.RouteEvents):              {httpx.ScopeRead},
	httpx.RouteKey(http.MethodGet, api.RouteFailedAdmissions):    {httpx.ScopeRead},
	httpx.RouteKey(http.MethodGet, api.RouteAdmissionsLag):       {httpx.ScopeRead},

	httpx.RouteKey(http.MethodPost, api.RouteVouchers):         {httpx.ScopeWrite},
	httpx.RouteKey(http.MethodPatch, api.RouteVoucher):         {httpx.ScopeWrite},
	httpx.RouteKey(http.MethodPost, api.RoutePause):            {httpx.ScopeWrite},
	httpx.RouteKey(http.MethodPost, api.RouteResume):           {httpx.ScopeWrite},
	httpx.RouteKey(http.MethodPost, api.RouteWarmup):           {httpx.ScopeWrite, httpx.ScopeInternal}, // a proxy warms a voucher it meets cold
	httpx.RouteKey(http.MethodPost, api.RouteReconcile):        {httpx.ScopeWrite},
	httpx.RouteKey(http.MethodPost, api.RouteEventRetry):       {httpx.ScopeWrite},
	httpx.RouteKey(http.MethodPost, api.RouteAdmissionReplay):  {httpx.ScopeWrite},
	httpx.RouteKey(http.MethodPost, api.RouteAdmissionDiscard): {httpx.ScopeWrite},
	httpx.RouteKey(http.MethodPost, api.RouteAdmissionReplay):  {httpx.ScopeWrite},
	httpx.RouteKey(http.MethodPost, api.RouteAdmissionDiscard): {httpx.ScopeWrite},

	httpx.RouteKey(http.MethodPost, api.RouteAdmitted):      {httpx.ScopeInternal},
	httpx.RouteKey(http.MethodPost, api.RouteAdmittedBatch): {httpx.ScopeInternal},
	httpx.RouteKey(http.MethodPost, api.RouteUnsettled):     {httpx.ScopeInternal},
	httpx.RouteKey(http.MethodGet, api.SettingsPath):        {httpx.ScopeInternal},
	httpx.RouteKey(http.MethodGet, api.VoucherCodesPath):    {httpx.ScopeInternal}, // the proxy's set of codes
}
