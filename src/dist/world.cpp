// placeholder, replaced by the dist module
namespace echo::dist {}
