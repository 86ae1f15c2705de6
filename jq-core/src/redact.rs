//! Server URLs as jq shows them: in errors, logs and `Debug` output,
//! without the credentials they carry; and the query parameters of jq's
//! own that a URL carries besides the driver's.

/// `url` with its credentials replaced by `***`: the password between
/// `user:` and `@` (`redis://:s3cret@host` becomes `redis://:***@host`),
/// and the value of every query parameter whose name holds `pass`,
/// `secret` or `token` (`?password=`, `?sslpassword=`). Every URL a
/// backend shows goes through here.
///
/// *A connection error is logged, pasted into tickets and shown on
/// dashboards; the password must not travel with it.* When the URL is
/// malformed (a password with an unescaped `/` or `@`), more is hidden
/// rather than less.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_owned() };
    // The userinfo ends at the last `@` of the authority; a password with
    // an unescaped `/` or `?` hides that end, so then take the last `@`
    // anywhere (hiding too much rather than too little).
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let at = rest[..authority_end].rfind('@').or_else(|| rest.rfind('@'));
    let (userinfo, after) = match at {
        Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
        None => (None, rest),
    };
    let mut out = format!("{scheme}://");
    if let Some(userinfo) = userinfo {
        match userinfo.split_once(':') {
            Some((user, _password)) => out.push_str(&format!("{user}:***@")),
            None => out.push_str(&format!("{userinfo}@")),
        }
    }
    match after.split_once('?') {
        None => out.push_str(after),
        Some((path, query)) => {
            out.push_str(path);
            out.push('?');
            let pairs: Vec<String> = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some((key, _)) if is_secret(key) => format!("{key}=***"),
                    _ => pair.to_owned(),
                })
                .collect();
            out.push_str(&pairs.join("&"));
        }
    }
    out
}

/// True for a query parameter that carries a credential.
fn is_secret(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    ["pass", "secret", "token"].iter().any(|word| key.contains(word))
}

/// Removes `name=VALUE` from `url`'s query and returns the rest and VALUE
/// (the last one when the name is there twice): jq's own parameters
/// (`schema`, `prefix`, `target_session_attrs`) are taken out before the
/// URL goes to a driver that would refuse them.
pub fn take_query_param(url: &str, name: &str) -> (String, Option<String>) {
    let Some((base, query)) = url.split_once('?') else { return (url.to_owned(), None) };
    let mut value = None;
    let kept: Vec<&str> = query
        .split('&')
        .filter(|pair| match pair.split_once('=') {
            Some((key, v)) if key == name => {
                value = Some(v.to_owned());
                false
            }
            _ => !pair.is_empty(),
        })
        .collect();
    let url = if kept.is_empty() { base.to_owned() } else { format!("{base}?{}", kept.join("&")) };
    (url, value)
}

#[cfg(test)]
mod tests {
    use super::redact_url;

    #[test]
    fn passwords_are_hidden_and_the_rest_kept() {
        let cases = [
            ("redis://:s3cret@127.0.0.1:6379/0", "redis://:***@127.0.0.1:6379/0"),
            ("rediss://app:s3cret@cache.example:6380", "rediss://app:***@cache.example:6380"),
            ("postgres://app:s3cret@db:5432/jobs?sslmode=require", "postgres://app:***@db:5432/jobs?sslmode=require"),
            ("postgres://app@db/jobs?password=s3cret&sslmode=x", "postgres://app@db/jobs?password=***&sslmode=x"),
            ("postgres://db/jobs?sslpassword=s3cret", "postgres://db/jobs?sslpassword=***"),
            ("redis://127.0.0.1:6379", "redis://127.0.0.1:6379"),
            ("postgres://app@db:5432/jobs", "postgres://app@db:5432/jobs"),
            ("postgres://app:s3c@ret@db/jobs", "postgres://app:***@db/jobs"),
            ("postgres://app:s3c/ret@db/jobs", "postgres://app:***@db/jobs"),
            ("postgres://app:s3c?ret@db/jobs", "postgres://app:***@db/jobs"),
            ("postgres://app:s3cret@db/jobs?application_name=a@b", "postgres://app:***@db/jobs?application_name=a@b"),
            ("sqlite://jobs.db", "sqlite://jobs.db"),
            ("not a url", "not a url"),
        ];
        for (url, shown) in cases {
            assert_eq!(redact_url(url), shown, "{url}");
            assert!(!redact_url(url).contains("s3c"), "{url}");
        }
    }
}
