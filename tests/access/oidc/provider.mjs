// A real OpenID provider for the single sign-on tests: panva's certified oidc-provider, configured
// here and started by tests/access/oidc/conftest.py on a free port of 127.0.0.1, saying when it
// listens on the pipe READY_FD.
//
// People live in the JSON file USERS_FILE, read again at every look-up, so a test changes a
// person's groups or disables them at the provider by rewriting it:
//   {"olivia": {"claims": {"name": ..., "groups": [...]}, "disabled": false, "tamper": ""}}
// A disabled person is an account the provider no longer finds: their refresh token is refused.
// "tamper" makes the token endpoint answer that person with a bad ID token, as an attacker in the
// middle or a misconfigured provider would: "forged" (signed with a key the provider never
// published), "audience" (issued to another application), "expired" (its exp an hour ago). The
// provider's own key signs the last two, so only the claim is wrong.
// The sign-in page is the provider's development interaction: any password is accepted.
import { closeSync, readFileSync, writeSync } from 'node:fs';
import { pathToFileURL } from 'node:url';

const modules = process.env.OIDC_MODULES;
const { default: Provider } = await import(pathToFileURL(`${modules}/oidc-provider/lib/index.js`).href);
const jose = await import(pathToFileURL(`${modules}/jose/dist/webapi/index.js`).href);

const port = Number(process.env.PORT);
const issuer = `http://127.0.0.1:${port}`;
const users = () => JSON.parse(readFileSync(process.env.USERS_FILE, 'utf8'));

const real = await jose.generateKeyPair('RS256', { extractable: true });
const forger = await jose.generateKeyPair('RS256', { extractable: true });
const jwk = { ...(await jose.exportJWK(real.privateKey)), kid: 'k1', alg: 'RS256', use: 'sig' };

const SCOPE = 'openid email profile groups';
const configuration = {
  clients: [{
    client_id: 'reckon',
    client_secret: 'reckon-test-secret',
    redirect_uris: [process.env.REDIRECT_URI],
    post_logout_redirect_uris: [process.env.POST_LOGOUT_URI],
    grant_types: ['authorization_code', 'refresh_token'],
    response_types: ['code'],
    token_endpoint_auth_method: 'client_secret_post',
  }],
  jwks: { keys: [jwk] },
  pkce: { required: () => true },
  scopes: ['openid', 'email', 'profile', 'groups', 'offline_access'],
  claims: {
    openid: ['sub'],
    email: ['email', 'email_verified'],
    profile: ['name', 'given_name', 'family_name', 'preferred_username'],
    groups: ['groups', 'tenants'],
  },
  async findAccount(ctx, id) {
    const person = users()[id];
    if (!person || person.disabled) return undefined;
    return { accountId: id, async claims() { return { sub: id, ...users()[id].claims }; } };
  },
  // Refresh tokens without offline_access: Reckon renews its session with them at its bound.
  async issueRefreshToken(ctx, client) { return client.grantTypeAllowed('refresh_token'); },
  // No consent screen: the organisation's own application is trusted for these scopes.
  async loadExistingGrant(ctx) {
    const id = ctx.oidc.result?.consent?.grantId || ctx.oidc.session.grantIdFor(ctx.oidc.client.clientId);
    if (id) return ctx.oidc.provider.Grant.find(id);
    const grant = new ctx.oidc.provider.Grant({ clientId: ctx.oidc.client.clientId, accountId: ctx.oidc.session.accountId });
    grant.addOIDCScope(SCOPE);
    await grant.save();
    return grant;
  },
  ttl: { AccessToken: 60, AuthorizationCode: 60, IdToken: 60, RefreshToken: 3600, Grant: 3600, Session: 3600, Interaction: 600 },
  features: { devInteractions: { enabled: true }, rpInitiatedLogout: { enabled: true } },
  cookies: { keys: ['reckon-test-cookie-key'] },
};

const provider = new Provider(issuer, configuration);

async function sign(claims, key) {
  return new jose.SignJWT(claims).setProtectedHeader({ alg: 'RS256', kid: 'k1' }).sign(key);
}

provider.use(async (ctx, next) => {
  await next();
  if (ctx.path !== '/token' || ctx.status !== 200 || !ctx.body?.id_token) return;
  const claims = jose.decodeJwt(ctx.body.id_token);
  const tamper = users()[claims.sub]?.tamper;
  const now = Math.floor(Date.now() / 1000);
  if (tamper === 'forged') ctx.body.id_token = await sign(claims, forger.privateKey);
  if (tamper === 'audience') ctx.body.id_token = await sign({ ...claims, aud: 'another-application' }, real.privateKey);
  if (tamper === 'expired') ctx.body.id_token = await sign({ ...claims, iat: now - 7200, exp: now - 3600 }, real.privateKey);
});

provider.listen(port, '127.0.0.1', () => {
  console.log(`listening ${issuer}`);
  // The test's pipe (READY_FD): the provider answers from now on.
  writeSync(Number(process.env.READY_FD), 'listening\n');
  closeSync(Number(process.env.READY_FD));
});
