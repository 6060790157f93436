//! The kubeconfig a client of this server uses: its address, its CA and a
//! token.

/// A kubeconfig for `server`, trusting the base64 PEM `ca`, with `token`.
pub fn kubeconfig(server: &str, ca: &str, token: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: modelplane\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\nusers:\n- name: modelplane\n  user:\n    token: {token}\ncontexts:\n- name: modelplane\n  context:\n    cluster: modelplane\n    user: modelplane\n    namespace: default\ncurrent-context: modelplane\n"
    )
}
