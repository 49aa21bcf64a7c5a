// placeholder
namespace echo::comm {}
