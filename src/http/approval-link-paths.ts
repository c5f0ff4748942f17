// Where approval links live: the confirmation page (dashboard) and its API routes. Both
// are open to callers without a token (security.ts): the link's signed token is the
// credential.

/** The dashboard page: <base>/approvals/<token>. */
export const APPROVAL_LINK_PAGE = "/approvals";
/** The API routes: <base>/api/approval-links/<token>. */
export const APPROVAL_LINK_API = "/approval-links";
