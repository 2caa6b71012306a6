//! Registration: what node-driver-registrar and the kubelet's RegisterPlugin ask the driver.

use super::case::{check, fail, Outcome};
use super::ctx::{Ctx, REGISTRAR_VERSIONS};
use super::facts;
use super::upstream;

pub async fn plugin_info(c: &mut Ctx) -> Outcome {
    let (name, version) = crate::driver::plugin_info(&c.channel, c.timeout)
        .await
        .map_err(fail(upstream::PLUGIN_INFO))?;
    if version.is_empty() {
        return Err(check(
            format!("GetPluginInfo answered name {name:?} with an empty vendor_version"),
            upstream::PLUGIN_INFO,
        ));
    }
    // ValidatePlugin on a host with no driver registered yet: only the name and versions count.
    let agent = c.start_host()?;
    let versions: Vec<String> = REGISTRAR_VERSIONS.iter().map(|v| v.to_string()).collect();
    kcsi::registration::validate(&agent, &name, &c.proxy_endpoint(), &versions)
        .map_err(fail(upstream::PLUGIN_INFO))?;
    Ok(format!("name {name:?}, vendor_version {version:?}"))
}

pub async fn node_info(c: &mut Ctx) -> Outcome {
    let first = c.restart().await?.node_id;
    let again = c.restart().await?;
    if again.node_id != first {
        return Err(check(
            format!(
                "NodeGetInfo answered node ID {first:?}, then {:?} on a re-registration",
                again.node_id
            ),
            upstream::REGISTER,
        ));
    }
    if again.max_volumes_per_node < 0 {
        return Err(check(
            format!(
                "NodeGetInfo answered max_volumes_per_node {}",
                again.max_volumes_per_node
            ),
            upstream::REGISTER,
        ));
    }
    Ok(format!(
        "node ID {:?} twice, max_volumes_per_node {}, topology {:?}",
        again.node_id, again.max_volumes_per_node, again.topology
    ))
}

pub async fn node_capabilities(c: &mut Ctx) -> Outcome {
    let first = facts::node_capabilities(&c.channel, c.timeout)
        .await
        .map_err(fail(upstream::CAPABILITIES))?;
    let again = facts::node_capabilities(&c.channel, c.timeout)
        .await
        .map_err(fail(upstream::CAPABILITIES))?;
    if first != again || first != c.facts.node {
        return Err(check(
            format!(
                "NodeGetCapabilities answered {:?}, then {first:?}, then {again:?}",
                c.facts.node
            ),
            upstream::CAPABILITIES,
        ));
    }
    Ok(c.facts.node_caps().join(", "))
}
