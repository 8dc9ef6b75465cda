// Shows every <time datetime="…"> in the browser's time zone; without
// JavaScript the page keeps the UTC time the server wrote.
document.querySelectorAll("time[datetime]").forEach(function (el) {
  var when = new Date(el.getAttribute("datetime"));
  if (!isNaN(when)) {
    el.title = el.getAttribute("datetime");
    el.textContent = when.toLocaleString();
  }
});
// Buttons that change things ask first.
document.querySelectorAll("form[data-confirm]").forEach(function (form) {
  form.addEventListener("submit", function (event) {
    if (!window.confirm(form.getAttribute("data-confirm"))) event.preventDefault();
  });
});
