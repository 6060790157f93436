//! Who is asking and what they may do: identities (the admin token,
//! static user tokens, ServiceAccount tokens the server signs), the
//! attributes of a request, RBAC as kube-apiserver's authorizer decides
//! it, and the bootstrap roles every cluster starts with.
//!
//! A domain of the server: it reads RBAC objects from a cluster's store and
//! never imports the HTTP layer, which asks it about each request.

pub mod bootstrap;
pub mod policy;
pub mod rbac;
pub mod request;
pub mod tokens;

use std::collections::BTreeMap;

pub use request::Attributes;

/// The group whose members may do anything (kube-apiserver's privileged
/// group, checked before RBAC).
pub const MASTERS: &str = "system:masters";
/// Every user a token or certificate identified.
pub const AUTHENTICATED: &str = "system:authenticated";
/// Every request without credentials.
pub const UNAUTHENTICATED: &str = "system:unauthenticated";
/// Every ServiceAccount, and those of one namespace (`…:<namespace>`).
pub const SERVICE_ACCOUNTS: &str = "system:serviceaccounts";

/// An authenticated (or anonymous) user.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

impl User {
    /// The holder of the admin token: `kubernetes-admin` in
    /// `system:masters`, as a kubeadm cluster's admin kubeconfig.
    pub fn admin() -> User {
        User {
            name: "kubernetes-admin".into(),
            groups: vec![MASTERS.into(), AUTHENTICATED.into()],
            ..User::default()
        }
    }

    /// A request without credentials.
    pub fn anonymous() -> User {
        User {
            name: "system:anonymous".into(),
            groups: vec![UNAUTHENTICATED.into()],
            ..User::default()
        }
    }

    /// A ServiceAccount's user.
    pub fn service_account(namespace: &str, name: &str, uid: &str) -> User {
        User {
            name: service_account_user(namespace, name),
            uid: uid.into(),
            groups: vec![
                SERVICE_ACCOUNTS.into(),
                format!("{SERVICE_ACCOUNTS}:{namespace}"),
                AUTHENTICATED.into(),
            ],
            ..User::default()
        }
    }

    /// Whether the user may do anything, RBAC unread.
    pub fn is_privileged(&self) -> bool {
        self.groups.iter().any(|g| g == MASTERS)
    }

    /// The ServiceAccount this user is, as (namespace, name).
    pub fn as_service_account(&self) -> Option<(&str, &str)> {
        self.name
            .strip_prefix("system:serviceaccount:")?
            .split_once(':')
    }
}

/// The user name of a ServiceAccount.
pub fn service_account_user(namespace: &str, name: &str) -> String {
    format!("system:serviceaccount:{namespace}:{name}")
}
