// The report page's filters (tpas_nb/templates/report.html.j2 inlines it): the selectors and the URL fragment hide sections.
(function(){
  var qs = Array.prototype.slice.call(document.querySelectorAll('section.query'));
  var keys = ['kind', 'action', 'scene', 'split'], sel = {};
  keys.forEach(function(k){ sel[k] = document.getElementById('f-' + k); });
  var fail = document.getElementById('f-fail'), shown = document.getElementById('shown');
  function apply(write){
    var n = 0;
    qs.forEach(function(q){
      var ok = keys.every(function(k){ return !sel[k].value || q.dataset[k] === sel[k].value; });
      if (fail.checked && q.dataset.rank === '1') ok = false;
      q.hidden = !ok; if (ok) n++;
    });
    shown.textContent = n;
    if (!write) return;
    var p = new URLSearchParams();
    keys.forEach(function(k){ if (sel[k].value) p.set(k, sel[k].value); });
    if (fail.checked) p.set('fail', '1');
    try { history.replaceState(null, '', '#' + p.toString()); } catch (e) { location.hash = p.toString(); }
  }
  function read(){
    var p = new URLSearchParams(location.hash.slice(1));
    keys.forEach(function(k){ var v = p.get(k) || ''; sel[k].value = v; if (sel[k].value !== v) sel[k].value = ''; });
    fail.checked = p.get('fail') === '1';
    apply(false);
  }
  keys.forEach(function(k){ sel[k].addEventListener('change', function(){ apply(true); }); });
  fail.addEventListener('change', function(){ apply(true); });
  window.addEventListener('hashchange', read);
  read();
})();
