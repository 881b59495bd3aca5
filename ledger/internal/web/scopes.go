package web

import (
	"net/http"

	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/httpx/auth"
)

// scopes are the scopes each of the ledger's routes takes (LEDGER_TOKENS'
// name:token:scope+scope); a route missing here is refused to every token.
// A proxy holds an internal token: besides the /internal routes it reads a
// voucher's terms, warms a voucher up, and relays its clients' reservation
// routes once it has checked their own tokens (PROXY_TOKENS), so those take
// internal too. Nothing else does: an internal token cannot change, list or
// export anything.
var scopes = auth.RouteScopes{
	auth.RouteKey(http.MethodPost, api.RouteReservations):  {auth.ScopeReserve, auth.ScopeInternal},
	auth.RouteKey(http.MethodGet, api.RouteReservation):    {auth.ScopeReserve, auth.ScopeInternal},
	auth.RouteKey(http.MethodPost, api.RouteConfirm):       {auth.ScopeSettle, auth.ScopeInternal},
	auth.RouteKey(http.MethodDelete, api.RouteReservation): {auth.ScopeSettle, auth.ScopeInternal},
	auth.RouteKey(http.MethodPost, api.RouteRefund):        {auth.ScopeSettle, auth.ScopeInternal},

	auth.RouteKey(http.MethodGet, api.RouteVouchers):            {auth.ScopeRead},
	auth.RouteKey(http.MethodGet, api.RouteVoucher):             {auth.ScopeRead, auth.ScopeInternal}, // the proxy's terms
	auth.RouteKey(http.MethodGet, api.RouteVoucherReservations): {auth.ScopeRead},
	auth.RouteKey(http.MethodGet, api.RouteExport):              {auth.ScopeRead},
	auth.RouteKey(http.MethodGet, api.RouteAudit):               {auth.ScopeRead},
	auth.RouteKey(http.MethodGet, api.RouteEvents):              {auth.ScopeRead},
	auth.RouteKey(http.MethodGet, api.RouteFailedAdmissions):    {auth.ScopeRead},
	auth.RouteKey(http.MethodGet, api.RouteAdmissionsLag):       {auth.ScopeRead},

	auth.RouteKey(http.MethodPost, api.RouteVouchers):         {auth.ScopeWrite},
	auth.RouteKey(http.MethodPatch, api.RouteVoucher):         {auth.ScopeWrite},
	auth.RouteKey(http.MethodPost, api.RoutePause):            {auth.ScopeWrite},
	auth.RouteKey(http.MethodPost, api.RouteResume):           {auth.ScopeWrite},
	auth.RouteKey(http.MethodPost, api.RouteWarmup):           {auth.ScopeWrite, auth.ScopeInternal}, // a proxy warms a voucher it meets cold
	auth.RouteKey(http.MethodPost, api.RouteReconcile):        {auth.ScopeWrite},
	auth.RouteKey(http.MethodPost, api.RouteEventRetry):       {auth.ScopeWrite},
	auth.RouteKey(http.MethodPost, api.RouteAdmissionReplay):  {auth.ScopeWrite},
	auth.RouteKey(http.MethodPost, api.RouteAdmissionDiscard): {auth.ScopeWrite},
	auth.RouteKey(http.MethodPost, api.RouteAdmissionReplay):  {auth.ScopeWrite},
	auth.RouteKey(http.MethodPost, api.RouteAdmissionDiscard): {auth.ScopeWrite},

	auth.RouteKey(http.MethodPost, api.RouteAdmitted):      {auth.ScopeInternal},
	auth.RouteKey(http.MethodPost, api.RouteAdmittedBatch): {auth.ScopeInternal},
	auth.RouteKey(http.MethodPost, api.RouteUnsettled):     {auth.ScopeInternal},
	auth.RouteKey(http.MethodGet, api.SettingsPath):        {auth.ScopeInternal},
	auth.RouteKey(http.MethodGet, api.VoucherCodesPath):    {auth.ScopeInternal}, // the proxy's set of codes
}
