// Placeholder: being implemented.
namespace qat {}
