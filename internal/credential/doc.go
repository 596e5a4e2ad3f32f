// Package credential is how a running member takes new credentials without
// being rebuilt: its Manager, caches and watches stay as they are.
//
// A member's config names its credentials in one of two ways, and each
// has its own way to a fresh credential after the API server refused one
// (401):
//
//   - An exec plugin: client-go's exec authenticator, shared by every
//     client built from the config, runs the plugin again when a request
//     is refused, but answers that request with the refusal all the same.
//     RetryRefused, wrapped around a member's HTTP clients, sends it once
//     more, with the credential the plugin gave; the request it sends
//     first carries a mark (Retries) so that the member does not take its
//     refusal for a verdict.
//   - A bearer token, a token file, or a username and password: a Holder
//     keeps them, and the member's transport stamps every request with the
//     Holder's current ones. A refused request makes the Holder read its
//     token file again, and goes once more if the token changed; Set swaps
//     in the credentials of an updated config (a rotated Secret or
//     kubeconfig), and a request refused with the old ones goes once more
//     with the new.
//
// A refusal that outlives both is the member's to judge (internal/reach):
// its credentials were revoked and nothing renewed them.
//
// A request is sent once more only if the API server refused it (it did
// nothing with it: authentication comes first), its caller has not given
// up, and its body can be read again.
package credential
