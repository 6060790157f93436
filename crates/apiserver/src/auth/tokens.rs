//! Bearer tokens and whom they name: the admin token (`system:masters`),
//! static user tokens read from a file in kube-apiserver's
//! `--token-auth-file` format, and ServiceAccount tokens the server signs
//! (ES256 JWTs with kube-apiserver's claims) and checks again on every use:
//! signature, issuer, audience, expiry, and that the ServiceAccount still
//! exists with the same uid.
//!
//! Tokens are secrets: no `Debug` here prints one, and no error quotes one.

use std::path::Path;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::rand::SystemRandom;
use ring::signature::{self, EcdsaKeyPair, KeyPair as _};
use serde_json::{Value, json};

use super::User;

/// Who a ServiceAccount token says issued it, and the audience the API
/// server accepts, as kube-apiserver's defaults on a kubeadm cluster.
pub const ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

/// A token's life when its request names none (kube-apiserver's default).
pub const DEFAULT_EXPIRATION: i64 = 3600;
/// The shortest life a TokenRequest may ask for.
pub const MIN_EXPIRATION: i64 = 600;

/// A user token from the token file.
#[derive(Clone, PartialEq, Eq)]
struct StaticToken {
    token: String,
    user: User,
}

/// Every token the server accepts.
pub struct Tokens {
    admin: Option<String>,
    users: Vec<StaticToken>,
    signer: Signer,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokens")
            .field(
                "users",
                &self.users.iter().map(|t| &t.user.name).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl Default for Tokens {
    /// No admin or user tokens; ServiceAccount tokens signed with a key
    /// made now (an in-process server's).
    fn default() -> Tokens {
        Tokens {
            admin: None,
            users: Vec::new(),
            signer: Signer::generate(),
        }
    }
}

/// What a ServiceAccount token names, once its signature and claims hold;
/// the caller checks the account still exists with this uid.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceAccountClaims {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// The token's own id (`jti`), as a credential id.
    pub id: String,
}

/// Who a token names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Bearer {
    User(User),
    /// A ServiceAccount, still to be looked up.
    ServiceAccount(ServiceAccountClaims),
}

impl Tokens {
    /// The admin token, the user tokens of `file` (if any), and the
    /// ServiceAccount signing key.
    pub fn new(admin: Option<String>, users: &str, signer: Signer) -> Result<Tokens, String> {
        Ok(Tokens {
            admin,
            users: parse_token_file(users)?,
            signer,
        })
    }

    /// Whom `token` names, if anyone.
    pub fn authenticate(&self, token: &str, now: i64) -> Option<Bearer> {
        if self
            .admin
            .as_deref()
            .is_some_and(|a| constant_time_eq(a.as_bytes(), token.as_bytes()))
        {
            return Some(Bearer::User(User::admin()));
        }
        if let Some(user) = self
            .users
            .iter()
            .find(|t| constant_time_eq(t.token.as_bytes(), token.as_bytes()))
        {
            return Some(Bearer::User(user.user.clone()));
        }
        self.signer.verify(token, now).map(Bearer::ServiceAccount)
    }

    /// The signer of ServiceAccount tokens.
    pub fn signer(&self) -> &Signer {
        &self.signer
    }
}

/// Equal in time independent of where the inputs differ.
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// kube-apiserver's token file: one `token,user,uid,"group1,group2"` per
/// line (groups optional); blank lines and `#` comments skipped.
fn parse_token_file(text: &str) -> Result<Vec<StaticToken>, String> {
    let mut out: Vec<StaticToken> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut fields = line.splitn(4, ',');
        let mut next = || {
            fields
                .next()
                .map(|f| f.trim().trim_matches('"').to_string())
        };
        let (token, name, uid, groups) = (next(), next(), next(), next());
        let (Some(token), Some(name), Some(uid)) = (token, name, uid) else {
            return Err(format!(
                "token file line {}: expected token,user,uid[,\"groups\"]",
                n + 1
            ));
        };
        if token.is_empty() || name.is_empty() {
            return Err(format!(
                "token file line {}: the token and the user name may not be empty",
                n + 1
            ));
        }
        if out.iter().any(|t| t.token == token) {
            return Err(format!(
                "token file line {}: a token may name one user only",
                n + 1
            ));
        }
        let mut groups: Vec<String> = groups
            .unwrap_or_default()
            .split(',')
            .map(|g| g.trim().to_string())
            .filter(|g| !g.is_empty())
            .collect();
        groups.push(super::AUTHENTICATED.into());
        out.push(StaticToken {
            token,
            user: User {
                name,
                uid,
                groups,
                ..User::default()
            },
        });
    }
    Ok(out)
}

/// Reads a token file, naming it in errors.
pub fn read_token_file(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path)
        .map_err(|e| format!("reading the token file {}: {e}", path.display()))
}

/// The ServiceAccount token signing key (ECDSA P-256).
pub struct Signer {
    key: EcdsaKeyPair,
    /// `kid`: the key's public half, hashed.
    id: String,
}

impl Signer {
    /// A new key.
    pub fn generate() -> Signer {
        Signer::from_pkcs8(&Signer::new_pkcs8()).expect("a key ring made is a key ring reads")
    }

    /// A new key's PKCS#8 document.
    pub fn new_pkcs8() -> Vec<u8> {
        let rng = SystemRandom::new();
        EcdsaKeyPair::generate_pkcs8(&signature::ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
            .map(|doc| doc.as_ref().to_vec())
            .unwrap_or_default()
    }

    /// The key in a PKCS#8 document.
    pub fn from_pkcs8(pkcs8: &[u8]) -> Result<Signer, String> {
        let key = EcdsaKeyPair::from_pkcs8(
            &signature::ECDSA_P256_SHA256_FIXED_SIGNING,
            pkcs8,
            &SystemRandom::new(),
        )
        .map_err(|e| format!("the ServiceAccount signing key is not a P-256 PKCS#8 key: {e}"))?;
        let digest = ring::digest::digest(&ring::digest::SHA256, key.public_key().as_ref());
        let id = URL_SAFE_NO_PAD.encode(digest.as_ref());
        Ok(Signer { key, id })
    }

    /// A token for the ServiceAccount `namespace/name` (`uid`), for
    /// `audiences` (the API server's when empty), valid from `now` for
    /// `seconds`; with the object it is bound to, if any.
    pub fn issue(
        &self,
        account: &ServiceAccountClaims,
        audiences: &[String],
        now: i64,
        seconds: i64,
        bound: Option<&Value>,
    ) -> String {
        let audiences: Vec<String> = if audiences.is_empty() {
            vec![ISSUER.to_string()]
        } else {
            audiences.to_vec()
        };
        let mut kubernetes = json!({
            "namespace": account.namespace,
            "serviceaccount": { "name": account.name, "uid": account.uid },
        });
        if let Some(bound) = bound
            && let Some(kind) = bound["kind"].as_str()
        {
            kubernetes[kind.to_ascii_lowercase()] =
                json!({ "name": bound["name"], "uid": bound["uid"] });
        }
        let claims = json!({
            "aud": audiences,
            "exp": now + seconds,
            "iat": now,
            "iss": ISSUER,
            "jti": account.id,
            "kubernetes.io": kubernetes,
            "nbf": now,
            "sub": super::service_account_user(&account.namespace, &account.name),
        });
        let header = json!({ "alg": "ES256", "kid": self.id });
        let signed = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(claims.to_string())
        );
        let signature = self
            .key
            .sign(&SystemRandom::new(), signed.as_bytes())
            .map(|s| URL_SAFE_NO_PAD.encode(s.as_ref()))
            .unwrap_or_default();
        format!("{signed}.{signature}")
    }

    /// The account a token of this key names, if its signature holds, it
    /// is for the API server's audience and it is valid at `now`.
    pub fn verify(&self, token: &str, now: i64) -> Option<ServiceAccountClaims> {
        let (signed, signature) = token.rsplit_once('.')?;
        let (header, claims) = signed.split_once('.')?;
        let header: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(header).ok()?).ok()?;
        if header["alg"] != "ES256" {
            return None;
        }
        let public = signature::UnparsedPublicKey::new(
            &signature::ECDSA_P256_SHA256_FIXED,
            self.key.public_key().as_ref(),
        );
        public
            .verify(signed.as_bytes(), &URL_SAFE_NO_PAD.decode(signature).ok()?)
            .ok()?;
        let claims: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(claims).ok()?).ok()?;
        let audience_holds = match &claims["aud"] {
            Value::String(one) => one == ISSUER,
            Value::Array(all) => all.iter().any(|a| a == ISSUER),
            _ => false,
        };
        let in_time = claims["nbf"].as_i64().is_none_or(|nbf| nbf <= now)
            && claims["exp"].as_i64().is_some_and(|exp| now < exp);
        if claims["iss"] != ISSUER || !audience_holds || !in_time {
            return None;
        }
        let kubernetes = &claims["kubernetes.io"];
        Some(ServiceAccountClaims {
            namespace: kubernetes["namespace"].as_str()?.to_string(),
            name: kubernetes["serviceaccount"]["name"].as_str()?.to_string(),
            uid: kubernetes["serviceaccount"]["uid"].as_str()?.to_string(),
            id: claims["jti"].as_str().unwrap_or_default().to_string(),
        })
    }
}

/// The user a verified ServiceAccount token names, once the account is
/// found to exist with the token's uid.
pub fn service_account_user(claims: &ServiceAccountClaims) -> User {
    let mut user = User::service_account(&claims.namespace, &claims.name, &claims.uid);
    if !claims.id.is_empty() {
        user.extra.insert(
            "authentication.kubernetes.io/credential-id".into(),
            vec![format!("JTI={}", claims.id)],
        );
    }
    user
}

#[cfg(test)]
mod tests {
    use super::*;

    fn account() -> ServiceAccountClaims {
        ServiceAccountClaims {
            namespace: "ml-team".into(),
            name: "trainer".into(),
            uid: "u-1".into(),
            id: "j-1".into(),
        }
    }

    #[test]
    fn a_signed_token_verifies_until_it_expires_and_only_with_its_key() {
        let signer = Signer::generate();
        let token = signer.issue(&account(), &[], 1_000, 600, None);
        assert_eq!(signer.verify(&token, 1_000), Some(account()));
        assert_eq!(signer.verify(&token, 1_599), Some(account()));
        assert_eq!(signer.verify(&token, 1_600), None, "expired");
        assert_eq!(
            Signer::generate().verify(&token, 1_000),
            None,
            "another key"
        );
        let mut forged = token.clone();
        forged.replace_range(forged.len() - 4.., "AAAA");
        assert_eq!(signer.verify(&forged, 1_000), None);
    }

    #[test]
    fn a_token_for_another_audience_is_not_the_api_servers() {
        let signer = Signer::generate();
        let token = signer.issue(&account(), &["vault".into()], 1_000, 600, None);
        assert_eq!(signer.verify(&token, 1_000), None);
    }

    #[test]
    fn the_token_file_is_read_as_kube_apiserver_reads_it() {
        let users =
            parse_token_file("# people\nt1,jane,u1,\"ml-team,readers\"\n\nt2,bob,u2\n").unwrap();
        assert_eq!(users[0].user.name, "jane");
        assert_eq!(
            users[0].user.groups,
            ["ml-team", "readers", "system:authenticated"]
        );
        assert_eq!(users[1].user.groups, ["system:authenticated"]);
        assert!(parse_token_file("only-a-token\n").is_err());
        assert!(parse_token_file("t,a,1\nt,b,2\n").is_err());
        let tokens = Tokens::new(Some("admin".into()), "t1,jane,u1", Signer::generate()).unwrap();
        assert!(matches!(tokens.authenticate("t1", 0), Some(Bearer::User(u)) if u.name == "jane"));
        assert!(
            matches!(tokens.authenticate("admin", 0), Some(Bearer::User(u)) if u.is_privileged())
        );
        assert_eq!(tokens.authenticate("nobody", 0), None);
        assert!(!format!("{tokens:?}").contains("t1"));
    }
}
