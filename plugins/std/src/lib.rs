//! placeholder
blis_plugin_api::export_plugin! { library: "blis-std", admission: [], routers: [], scorers: [] }
